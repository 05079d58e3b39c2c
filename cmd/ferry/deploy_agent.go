package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy/upload"
)

// deployViaAgent is ferry deploy --via-agent: one HTTPS stream of the
// archive to the agent's upload endpoint, through a tunnel; the agent
// verifies it against the keys the cluster trusts, pushes it and applies
// its Package. With --key, the archive is verified here first too.
func deployViaAgent(cmd *cobra.Command, kube *kubeFlags, output cli.OutputFlag, arg, namespace string, keys []string, flags deployFlags, wait bool) error {
	path, ref, err := cli.ParseSource(arg)
	if err != nil {
		return err
	}
	if path == "" {
		return fmt.Errorf("--via-agent uploads a package archive, and %s is a registry reference: `ferry package pull` it first", ref)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--via-agent uploads a package archive (.tar or .tar.zst), and %s is a folder", path)
	}
	if flags.insecure {
		return errors.New("--via-agent: the agent verifies every upload against the keys the cluster trusts; --insecure-skip-signature-verification does not apply")
	}
	if len(keys) > 0 {
		vks, err := cli.LoadVerifyKeys(keys)
		if err != nil {
			return err
		}
		r, err := artifact.Open(cmd.Context(), path)
		if err != nil {
			return err
		}
		if _, err := artifact.Verify(cmd.Context(), r, "", artifact.VerifyOptions{Keys: vks}); err != nil {
			return err
		}
	}
	cs, cfg, err := kube.clientConfig()
	if err != nil {
		return err
	}
	c, err := upload.Connect(cmd.Context(), cfg, cs, namespace)
	if err != nil {
		return err
	}
	defer c.Close()
	// The archive, or a split package's parts one after the other, each
	// checked against its index as sent.
	pkg, err := artifact.Open(cmd.Context(), path)
	if err != nil {
		return err
	}
	f, size, err := pkg.OpenArchive()
	if err != nil {
		return err
	}
	defer f.Close()

	progress, done := cli.NewProgress(cmd)
	defer done()
	body := io.Reader(f)
	if progress != nil {
		body = &countingReader{r: f, report: func(n int64) {
			progress(artifact.Progress{Phase: "upload", Item: fmt.Sprintf("%s/%s", cli.HumanBytes(n), cli.HumanBytes(size))})
		}}
	}
	ctx := cmd.Context()
	if wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deployWait(flags.timeout))
		defer cancel()
	}
	out := cmd.OutOrStdout()
	start := time.Now()
	res, err := c.Upload(ctx, body, upload.Options{Components: flags.components, Set: flags.set, Timeout: flags.timeout, NoWait: !wait, Source: path}, func(e upload.Event) {
		if output.JSON() {
			return
		}
		done()
		switch {
		case e.Condition != nil:
			fmt.Fprintf(out, "Package %s: %s=%s %s: %s\n", namespace, e.Condition.Type, e.Condition.Status, e.Condition.Reason, e.Condition.Message)
		case e.Phase == upload.PhaseReceived:
			fmt.Fprintf(out, "uploaded %s in %.1fs: %s\n", cli.HumanBytes(e.Bytes), time.Since(start).Seconds(), e.Message)
		case e.Message != "":
			fmt.Fprintf(out, "%s: %s\n", e.Phase, e.Message)
		}
	})
	if err != nil {
		return err
	}
	if output.JSON() {
		return cli.WriteJSON(out, struct {
			*upload.Result
			Via string `json:"via"`
		}{res, c.Endpoint().String()})
	}
	if !wait {
		fmt.Fprintf(out, "uploaded %s %s (%s); Package %s/%s applied, not waiting\n", res.Name, res.Version, res.Digest, res.Namespace, res.Name)
		return nil
	}
	fmt.Fprintf(out, "deployed %s %s (%s) through the agent, signed by %v\n", res.Name, res.Version, res.Digest, res.SignedBy)
	fmt.Fprintf(out, "agent via %s\n", c.Endpoint())
	return nil
}

// deployWait bounds --via-agent's wait when the package's components are
// not known here: the upload, verify and push, and the install.
func deployWait(timeout time.Duration) time.Duration {
	return 30*time.Minute + 10*timeout
}

// countingReader reports the bytes read so far, at most ten times a second.
type countingReader struct {
	r      io.Reader
	n      int64
	last   time.Time
	report func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if now := time.Now(); now.Sub(c.last) > 100*time.Millisecond || err == io.EOF {
		c.last = now
		c.report(c.n)
	}
	return n, err
}
