package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/conformance"
)

type registryCheckOptions struct {
	all       bool
	workflows []string
	checks    []string
	remote    cli.RemoteFlags
	output    string
	largeBlob int64
}

func newRegistryCheckCmd() *cobra.Command {
	o := registryCheckOptions{}
	cmd := &cobra.Command{
		Use:   "check REGISTRY[/REPOSITORY]",
		Short: "Check that a registry can hold ferry packages (OCI distribution-spec conformance)",
		Long: `Check a registry against ferry's OCI distribution-spec v1.1 conformance suite.

By default only the checks a ferry package needs are run: image indexes with an
artifactType, custom config media types, chunked uploads, cross-repository
mounts, and referrers through the referrers API or the tag-schema fallback.
--all runs the whole suite (pull, push, content discovery, content management);
--workflow selects workflows of it.

The checks write test content under REPOSITORY (default ferry-conformance) in a
fresh sub-repository per run, and delete some of it. Plain HTTP is used for
loopback hosts (unless --ca-file or --insecure asks for TLS) and with
--plain-http, HTTPS otherwise, unless the REGISTRY is a full http(s):// URL.`,
		Example: `  ferry registry check 127.0.0.1:5000
  ferry registry check registry.example:5000/scratch --all --username ci --password-stdin < token
  ferry registry check https://registry.example --workflow pull --workflow discovery -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRegistryCheck(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.all, "all", false, "run the whole suite, not just what ferry needs")
	f.StringSliceVar(&o.workflows, "workflow", nil, "run these workflows of the suite: pull, push, discovery, management (repeatable)")
	f.StringSliceVar(&o.checks, "check", nil, "run these checks by ID, e.g. push/blob-chunked (repeatable)")
	o.remote.Register(cmd)
	cli.AddOutputFlag(cmd, &o.output)
	f.Int64Var(&o.largeBlob, "large-blob-size", conformance.DefaultLargeBlobSize, "size in bytes of the large-blob upload check (negative skips it)")
	return cmd
}

// splitRegistryRef turns REGISTRY[/REPOSITORY] or an http(s) URL into a base
// URL and a repository. Without a scheme, a loopback host is spoken to over
// plain HTTP unless TLS was asked for (tlsAsked: --ca-file or --insecure),
// any host when plainHTTP, and HTTPS otherwise: the rule of the other
// commands (artifact.RemoteOptions).
func splitRegistryRef(ref string, plainHTTP, tlsAsked bool) (base, repo string, err error) {
	scheme := ""
	if s, rest, ok := strings.Cut(ref, "://"); ok {
		scheme, ref = s, rest
	}
	host, repo, _ := strings.Cut(ref, "/")
	if host == "" {
		return "", "", fmt.Errorf("registry reference %q has no host", ref)
	}
	if scheme == "" {
		scheme = "https"
		h := host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		}
		loopback := strings.EqualFold(h, "localhost")
		if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
			loopback = true
		}
		if plainHTTP || (loopback && !tlsAsked) {
			scheme = "http"
		}
	}
	return scheme + "://" + host, strings.Trim(repo, "/"), nil
}

func runRegistryCheck(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, ref string, o registryCheckOptions) error {
	if err := cli.CheckOutput(o.output, false); err != nil {
		return err
	}
	tlsConfig, err := o.remote.TLSConfig(stderr)
	if err != nil {
		return err
	}
	base, repo, err := splitRegistryRef(ref, o.remote.PlainHTTP, tlsConfig != nil)
	if err != nil {
		return err
	}
	cfg := conformance.Config{
		URL:           base,
		Repo:          repo,
		Username:      o.remote.Username,
		Checks:        o.checks,
		LargeBlobSize: o.largeBlob,
	}
	if o.remote.Username == "" && o.remote.PasswordStdin {
		return errors.New("--password-stdin needs --username")
	}
	if o.remote.Username != "" {
		if cfg.Password, err = o.remote.Password(stdin); err != nil {
			return err
		}
	}
	if tlsConfig != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tlsConfig
		cfg.Client = &http.Client{Timeout: 2 * time.Minute, Transport: t}
	}
	for _, w := range o.workflows {
		wf, err := conformance.ParseWorkflow(w)
		if err != nil {
			return fmt.Errorf("--workflow: %w", err)
		}
		cfg.Workflows = append(cfg.Workflows, wf)
	}
	if !o.all && len(o.workflows) == 0 && len(o.checks) == 0 {
		cfg.Checks = conformance.Profile
	}
	rep, err := conformance.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if o.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		if err := conformance.WriteResults(stdout, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\n%s: %s\n", rep.URL, rep.Total())
	}
	if n := rep.Total().Failed; n > 0 {
		return fmt.Errorf("%s: %d of %d checks failed", rep.URL, n, len(rep.Results))
	}
	return nil
}
