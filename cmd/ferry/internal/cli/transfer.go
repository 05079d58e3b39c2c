package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/confine"
)

// RemoteFlags are the flags every registry-talking command shares, named
// as crane's and oras's: --plain-http, -u/--username with --password-stdin,
// --ca-file and --insecure.
type RemoteFlags struct {
	PlainHTTP, Insecure, PasswordStdin bool
	Username, CAFile                   string
}

// Register adds every remote flag: for a command that talks to the one
// registry its REF names.
func (f *RemoteFlags) Register(cmd *cobra.Command) {
	f.RegisterTLS(cmd)
	cmd.Flags().StringVarP(&f.Username, "username", "u", "", "registry user name (password from --password-stdin or $FERRY_REGISTRY_PASSWORD; default: the docker config file's credentials)")
	cmd.Flags().BoolVar(&f.PasswordStdin, "password-stdin", false, "read the registry password (or token) from standard input")
}

// RegisterTLS adds the transport flags only: for a command that may talk to
// several registries (credentials then come from the docker config file).
func (f *RemoteFlags) RegisterTLS(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.PlainHTTP, "plain-http", false, "use plain HTTP for the registry (loopback registries always may)")
	cmd.Flags().StringVar(&f.CAFile, "ca-file", "", "PEM file of CA certificates to trust beside the system's (loopback registries then speak HTTPS too)")
	cmd.Flags().BoolVar(&f.Insecure, "insecure", false, "skip TLS certificate verification (anyone on the path can read and change what is sent)")
}

// PasswordEnvRegistry is where a registry password is read from when
// --username is given without --password-stdin.
const PasswordEnvRegistry = "FERRY_REGISTRY_PASSWORD"

// tlsConfig is the TLS configuration --ca-file and --insecure ask for, or
// nil for the default; --insecure is announced on stderr.
// MaxCABundleSize bounds a CA bundle file (the system's whole bundle is
// about 220 KiB).
const MaxCABundleSize = 4 << 20

func (f *RemoteFlags) TLSConfig(stderr io.Writer) (*tls.Config, error) {
	if f.CAFile == "" && !f.Insecure {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := confine.ReadPath(f.CAFile, MaxCABundleSize)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", f.CAFile)
		}
		cfg.RootCAs = pool
	}
	if f.Insecure {
		fmt.Fprintln(stderr, "ferry: WARNING: --insecure: registry TLS certificates are not verified; anyone on the network path can read and change what is sent")
		cfg.InsecureSkipVerify = true
	}
	return cfg, nil
}

// Password is the registry password for --username: from standard input
// with --password-stdin, else from $FERRY_REGISTRY_PASSWORD.
func (f *RemoteFlags) Password(stdin io.Reader) (string, error) {
	if f.PasswordStdin {
		if f.Username == "" {
			return "", errors.New("--password-stdin needs --username")
		}
		line, err := bufio.NewReader(io.LimitReader(stdin, MaxPasswordSize+1)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("reading the password from standard input: %w", err)
		}
		if len(line) > MaxPasswordSize {
			return "", fmt.Errorf("the password on standard input is longer than %d bytes", MaxPasswordSize)
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	return passwordFromEnv(), nil
}

// MaxPasswordSize bounds the password (or token) --password-stdin reads:
// one line of at most 64 KiB (registry tokens are a few KiB).
const MaxPasswordSize = 64 << 10

// passwordFromEnv is $FERRY_REGISTRY_PASSWORD.
func passwordFromEnv() string { return os.Getenv(PasswordEnvRegistry) }

// Options turns the flags into artifact.RemoteOptions. Credentials given
// with --username go to ref's registry host only; every other host gets
// the docker config file's.
func (f *RemoteFlags) Options(cmd *cobra.Command, ref string) (artifact.RemoteOptions, error) {
	ro, err := f.transport(cmd.ErrOrStderr())
	if err != nil {
		return ro, err
	}
	if f.Username == "" {
		if f.PasswordStdin {
			return ro, errors.New("--password-stdin needs --username")
		}
		return ro, nil
	}
	pw, err := f.Password(cmd.InOrStdin())
	if err != nil {
		return ro, err
	}
	store, err := artifact.DockerCredentials(credentials.StoreOptions{})
	if err != nil {
		return ro, err
	}
	fallback := credentials.Credential(store)
	host := registryHost(ref)
	cred := auth.Credential{Username: f.Username, Password: pw}
	ro.Credential = func(ctx context.Context, hostport string) (auth.Credential, error) {
		if hostport == host || (host == "docker.io" && hostport == "registry-1.docker.io") {
			return cred, nil
		}
		return fallback(ctx, hostport)
	}
	return ro, nil
}

// transport is the flags' plain-HTTP and TLS choices, without credentials.
func (f *RemoteFlags) transport(stderr io.Writer) (artifact.RemoteOptions, error) {
	tlsConfig, err := f.TLSConfig(stderr)
	return artifact.RemoteOptions{PlainHTTP: f.PlainHTTP, TLS: tlsConfig}, err
}

// registryHost is the host[:port] a reference or REGISTRY[/prefix] names.
func registryHost(ref string) string {
	host, _, _ := strings.Cut(strings.TrimPrefix(ref, OCIScheme), "/")
	return host
}

// ociScheme marks an argument as a registry reference, as helm's and
// oras's oci:// does.
const OCIScheme = "oci://"

// ParseSource decides whether a PKG|REF argument is a package on disk
// (path) or a registry reference (ref). oci:// means a reference; ./, ../
// or / a path; an existing file or folder is a path, and so are a split
// package's names (artifact.PartsIndexPath) and a name ending in .tar or
// .tar.zst. Otherwise a first element that is a
// registry host (with a dot or port, or localhost) means a reference. A
// path that does not exist is "no such file"; a reference must name a tag
// or a digest.
func ParseSource(arg string) (path, ref string, err error) {
	if r, ok := strings.CutPrefix(arg, OCIScheme); ok {
		return "", r, checkTagged(r)
	}
	_, err = os.Stat(arg)
	switch {
	case err == nil || artifact.PartsIndexPath(arg) != "":
		return arg, "", nil
	case looksLikeRef(arg):
		return "", arg, checkTagged(arg)
	case errors.Is(err, fs.ErrNotExist):
		return "", "", fmt.Errorf("%s: no such file or directory (a registry reference is host/repository:tag, or oci://…)", arg)
	}
	return arg, "", nil
}

// OpenSource opens what PKG|REF names (parseSource) as a target for the
// verbs that take one: a package on disk (reference "", its root) or a
// registry repository and the tag or digest in it. The registry flags are
// checked either way.
func OpenSource(cmd *cobra.Command, arg string, remote RemoteFlags) (oras.Target, string, error) {
	path, ref, err := ParseSource(arg)
	if err != nil {
		return nil, "", err
	}
	ro, err := remote.Options(cmd, ref)
	if err != nil {
		return nil, "", err
	}
	if path != "" {
		r, err := artifact.Open(cmd.Context(), path)
		if err != nil {
			return nil, "", err
		}
		return r, "", nil
	}
	repo, err := ro.Repository(ref)
	if err != nil {
		return nil, "", err
	}
	return repo, repo.Reference.Reference, nil
}

// looksLikeRef reports whether arg, which is not on disk, reads as a
// registry reference rather than a path.
func looksLikeRef(arg string) bool {
	if strings.HasPrefix(arg, "./") || strings.HasPrefix(arg, "../") || strings.HasPrefix(arg, "/") || archiveFormat(arg) != "" {
		return false
	}
	host, _, ok := strings.Cut(arg, "/")
	return ok && (strings.ContainsAny(host, ".:") || host == "localhost")
}

// checkTagged refuses a reference with no tag or digest, or one that does
// not parse.
func checkTagged(ref string) error {
	r, err := registry.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("%q is neither a file nor a valid registry reference (host/repository:tag or @sha256:…)", ref)
	}
	if r.Reference == "" {
		return fmt.Errorf("%s names no tag or digest: add :TAG (a package's version is its tag) or @sha256:…", ref)
	}
	return nil
}

func newPushCmd() *cobra.Command {
	var (
		remote RemoteFlags
		output OutputFlag
		mount  string
	)
	cmd := &cobra.Command{
		Use:   "push PKG REF",
		Short: "Push a package (archive or layout folder) to an OCI registry",
		Example: `  # Push to registry.example.com/apps/app, tagged with the package's version
  ferry package push app.tar.zst registry.example.com/apps/app

  ferry package push app.tar.zst 127.0.0.1:5000/apps/app:1.0.0`,
		Long: `Push the whole package graph — root index, package manifest, charts, images,
signatures — to REF (host/repo[:tag], oci:// optional), children before
parents, streaming the archive in one pass. Blobs the registry already has
are skipped; when it already holds the package root and its signature,
nothing is read or uploaded and only the tags are set ("unchanged"). Without a tag, the package's version is the tag.
Credentials come from --username/--password-stdin or the docker config file
(ferry registry login).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			ref := strings.TrimPrefix(args[1], OCIScheme)
			parsed, err := registry.ParseReference(ref)
			if err != nil {
				return fmt.Errorf("%q is not a registry reference (host/repository[:tag]): %w", args[1], err)
			}
			if strings.HasPrefix(parsed.Reference, "sha256:") {
				return fmt.Errorf("%s: push to a tag (or to host/repository, tagged with the package's version), not a digest", args[1])
			}
			ro, err := remote.Options(cmd, ref)
			if err != nil {
				return err
			}
			r, err := artifact.Open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if parsed.Reference == "" {
				ref += ":" + r.Config().Version
			}
			progress, done := NewProgress(cmd)
			res, err := artifact.Push(cmd.Context(), r, ref, artifact.PushOptions{Remote: ro, MountFrom: mount, Progress: progress})
			done()
			if err != nil {
				return err
			}
			if output.JSON() {
				return WriteJSON(cmd.OutOrStdout(), map[string]any{
					"ref": res.Ref, "root": res.Root.Digest, "pushed": res.Pushed, "skipped": res.Skipped, "bytesPushed": res.BytesPushed, "unchanged": res.Unchanged,
				})
			}
			if res.Unchanged {
				fmt.Fprintf(cmd.OutOrStdout(), "pushed %s: unchanged, the registry already holds the package (tagged)\n%s\n", res.Ref, res.Root.Digest)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s: %d blobs uploaded (%s), %d already there\n%s\n", res.Ref, res.Pushed, HumanBytes(res.BytesPushed), res.Skipped, res.Root.Digest)
			return nil
		},
	}
	remote.Register(cmd)
	output.Register(cmd)
	cmd.Flags().StringVar(&mount, "mount-from", "", "repository on the same registry to mount missing blobs from")
	return cmd
}

func newPullCmd() *cobra.Command {
	var (
		remote RemoteFlags
		output = OutputFlag{WritesFile: true}
		file   FileFlag
		keys   []string
	)
	cmd := &cobra.Command{
		Use:   "pull REF -f FILE",
		Short: "Pull a package from an OCI registry into an archive",
		Example: `  ferry package pull registry.example.com/apps/app:1.0.0 -f app.tar.zst

  # Only if cosign.pub signed it
  ferry package pull 127.0.0.1:5000/apps/app:1.0.0 -f app.tar --key cosign.pub`,
		Long: `Pull the package REF (tag or digest) into FILE (.tar.zst or .tar), verifying
every blob against its digest; written atomically. What push sent comes back
byte for byte. With --key, a valid signature over the root by that key is
required first: nothing is written otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if file.Path == "" {
				return fmt.Errorf("-f FILE is required: the archive to write (.tar.zst or .tar)")
			}
			if err := file.Validate(""); err != nil {
				return err
			}
			ref := strings.TrimPrefix(args[0], OCIScheme)
			if err := checkTagged(ref); err != nil {
				return err
			}
			ro, err := remote.Options(cmd, ref)
			if err != nil {
				return err
			}
			verifyKeys, err := LoadVerifyKeys(keys)
			if err != nil {
				return err
			}
			repo, err := ro.Repository(ref)
			if err != nil {
				return err
			}
			progress, done := NewProgress(cmd)
			res, err := artifact.Pull(cmd.Context(), repo, repo.Reference.Reference, file.Path, artifact.PullOptions{Progress: progress, Keys: verifyKeys})
			done()
			if err != nil {
				return err
			}
			if output.JSON() {
				return WriteJSON(cmd.OutOrStdout(), map[string]any{
					"path": res.Path, "root": res.Root.Digest, "name": res.Config.Name, "version": res.Config.Version, "size": res.Size, "blobs": res.Blobs, "signatures": res.Signatures,
				})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pulled %s → %s (%s %s, %s, %d blobs)\n%s\n", args[0], res.Path, res.Config.Name, res.Config.Version, HumanBytes(res.Size), res.Blobs, res.Root.Digest)
			return nil
		},
	}
	file.Register(cmd, "archive to write (.tar.zst or .tar; required)")
	AddKeyFlag(cmd, &keys)
	remote.Register(cmd)
	output.Register(cmd)
	return cmd
}
