package centre

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/internal/atomicfile"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// MediaTypeBundle is the Content-Type of a bundle's answer: a delta
// archive (.tar.zst).
const MediaTypeBundle = "application/vnd.ferry.delta.v1.tar+zstd"

// serveBundle answers a member's request for the delta from its receipt to
// one of its desired packages: anything not in its own desired state is
// refused (403). One request of a member at a time (429 for another);
// its body is read, and the delta written to a temporary file, in one of
// the DefaultParallelBundles slots; the member is read again after each
// wait, so that one revoked meanwhile gets nothing; the file is sent
// outside the slot, cut off if the member stops reading for the
// StallTimeout, and removed.
func (c *Centre) serveBundle(w http.ResponseWriter, r *http.Request) (string, error) {
	ctx := r.Context()
	m, err := c.authenticate(r)
	if err != nil {
		return "", err
	}
	done, err := c.only(r.URL.Path, m.Name)
	if err != nil {
		return m.Name, err
	}
	defer done()
	if err := c.acquire(ctx); err != nil {
		return m.Name, err
	}
	held := true
	release := func() {
		if held {
			held = false
			c.release()
		}
	}
	defer release()
	var req wire.BundleRequest
	if err := c.readJSON(w, r, wire.MaxBundleRequest, "bundle request", &req); err != nil {
		return m.Name, err
	}
	if !reDigest.MatchString(req.Digest) {
		return m.Name, refuse(http.StatusBadRequest, nil, "%q is not a digest (sha256:<64 hex digits>)", truncate(req.Digest))
	}
	rc, err := artifact.ParseReceipt(req.Receipt)
	if err != nil {
		return m.Name, badReceipt("the bundle request", err)
	}
	req.Receipt = nil
	now, err := c.recheck(ctx, m)
	if err != nil {
		return m.Name, err
	}
	d, err := c.desired(ctx, now)
	if err != nil {
		return m.Name, err
	}
	if !slices.ContainsFunc(d.Packages, func(p wire.DesiredPackage) bool { return p.Repository == req.Repository && p.Digest == req.Digest }) {
		return m.Name, refuse(http.StatusForbidden, nil, "%s@%s is not in member %s's desired state", truncate(req.Repository), req.Digest, m.Name)
	}
	dir, err := scratch.MkdirTemp(c.spool(), "bundle-")
	if err != nil {
		return m.Name, fmt.Errorf("make room for the bundle in %s: %w", c.spool(), err)
	}
	defer dir.Remove()
	res, err := c.delta(ctx, req.Repository, req.Digest, rc, filepath.Join(dir.Path, "bundle.tar.zst"))
	if err != nil {
		return m.Name, err
	}
	rc = nil
	release()
	if _, err := c.recheck(ctx, m); err != nil {
		return m.Name, err
	}
	f, err := os.Open(res.Path)
	if err != nil {
		return m.Name, err
	}
	defer f.Close()
	w.Header().Set("Content-Type", MediaTypeBundle)
	w.Header().Set("Content-Length", strconv.FormatInt(res.Size, 10))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rctl := http.NewResponseController(w)
	if _, err := io.Copy(&progressWriter{w: w, rc: rctl, stall: c.stall()}, f); err != nil {
		// The answer has begun: the member sees a short body.
		c.log().Warn("fleet bundle broke off", "member", m.Name, "error", oneLine(err.Error()))
	}
	_ = rctl.SetWriteDeadline(time.Time{})
	c.log().Info("fleet bundle", "member", m.Name, "repository", req.Repository, "digest", req.Digest,
		"bytes", res.Size, "carried", res.CarriedSize, "omitted", res.OmittedSize)
	return m.Name, nil
}

// acquire waits for one of the DefaultParallelBundles slots.
func (c *Centre) acquire(ctx context.Context) error {
	c.init()
	select {
	case c.bundles <- struct{}{}:
		return nil
	case <-ctx.Done():
		return refuse(http.StatusServiceUnavailable, nil, "gave up waiting for a bundle slot: %v", ctx.Err())
	}
}

func (c *Centre) release() { <-c.bundles }

// delta writes the delta of repository@d against have at out.
func (c *Centre) delta(ctx context.Context, repository, d string, have *artifact.Receipt, out string) (*artifact.DeltaResult, error) {
	path, err := c.spooled(ctx, repository, d)
	if err != nil {
		return nil, err
	}
	r, err := artifact.OpenAs(ctx, path, repository+"@"+d)
	if err != nil {
		_ = os.Remove(path) // damaged in the spool: pulled again next time
		return nil, fmt.Errorf("open the spooled package %s@%s: %w", repository, d, err)
	}
	res, err := artifact.Delta(ctx, r, have, out, artifact.DeltaOptions{})
	if errors.Is(err, artifact.ErrCorrupt) {
		_ = os.Remove(path)
	}
	if err != nil {
		return nil, fmt.Errorf("the delta of %s@%s: %w", repository, d, err)
	}
	return res, nil
}

// spooled is the package repository@d of the centre's registry as an
// archive in the spool: pulled once (requests for one digest at once wait
// for one pull) and kept.
func (c *Centre) spooled(ctx context.Context, repository, d string) (string, error) {
	dir := filepath.Join(c.spool(), "packages")
	path := filepath.Join(dir, strings.Replace(d, ":", "-", 1)+".tar")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	_, err, _ := c.pulls.Do(d, func() (any, error) {
		if _, err := os.Stat(path); err == nil {
			return nil, nil
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		repo, err := c.Remote.Repository(c.Registry + "/" + repository)
		if err != nil {
			return nil, err
		}
		_, err = artifact.Pull(context.WithoutCancel(ctx), repo, d, path, artifact.PullOptions{Format: artifact.FormatTar})
		return nil, err
	})
	if err != nil {
		return "", fmt.Errorf("pull %s@%s from %s: %w", repository, d, c.Registry, err)
	}
	return path, nil
}

// BundleResult is what Bundle wrote.
type BundleResult struct {
	Member     string `json:"member"`
	Package    string `json:"package"`
	Placement  string `json:"placement"`
	Repository string `json:"repository"`
	Digest     string `json:"digest"`
	Version    string `json:"version,omitempty"`
	// Delta is the delta written at its Path.
	Delta *artifact.DeltaResult `json:"delta"`
	// Values is the file the placement's values for the member were
	// written to (<out>.values.json), if it has any.
	Values string `json:"values,omitempty"`
	// Receipt is the digest of the receipt the delta was made against
	// ("" for none: the whole package): the member's receipt of the
	// package's repository in its registry, where the site's deploy
	// completes the delta.
	Receipt string `json:"receipt,omitempty"`
	// WholeReceipt is set when the delta was made against the receipt of
	// the member's whole registry instead, its last report carrying none
	// per repository (an older ferry's): the delta may leave out a blob
	// the site holds only in another repository, and the site's deploy
	// then refuses it, naming the blobs missing.
	WholeReceipt bool `json:"wholeReceipt,omitempty"`
}

// Bundle writes a carried member's bundle for its desired package pkg (""
// when it has one): the delta to the package at the digest its placement
// gives it from the receipt of the package's repository its last report
// carried (see BundleResult's Receipt and WholeReceipt), at out, and the
// placement's values for it at out+".values.json" when there are any:
// both or neither (the bundle is made in a temporary folder beside out,
// and moved there once its values are written). out may not be the
// spooled package the bundle is made from.
func (c *Centre) Bundle(ctx context.Context, member, pkg, out string) (*BundleResult, error) {
	m, err := c.member(ctx, member)
	if err != nil {
		return nil, err
	}
	d, err := c.desired(ctx, m)
	if err != nil {
		return nil, err
	}
	var want *wire.DesiredPackage
	var names []string
	for i, p := range d.Packages {
		names = append(names, p.Name)
		if p.Name == pkg || (pkg == "" && len(d.Packages) == 1) {
			want = &d.Packages[i]
		}
	}
	switch {
	case want == nil && len(names) == 0:
		return nil, fmt.Errorf("member %s has no desired package yet", member)
	case want == nil && pkg == "":
		return nil, fmt.Errorf("member %s has %d desired packages (%s): name one", member, len(names), strings.Join(names, ", "))
	case want == nil:
		return nil, fmt.Errorf("package %s is not in member %s's desired state (%s)", pkg, member, strings.Join(names, ", "))
	}
	// The site's deploy pushes the package to the repository of its name.
	have, used, whole, err := c.bundleReceipt(ctx, m, want.Name)
	if err != nil {
		return nil, err
	}
	res := &BundleResult{Member: member, Package: want.Name, Placement: want.Placement, Repository: want.Repository,
		Digest: want.Digest, Version: want.Version, Receipt: used, WholeReceipt: whole}
	src, err := c.spooled(ctx, want.Repository, want.Digest)
	if err != nil {
		return nil, err
	}
	if sameFile(out, src) {
		return nil, fmt.Errorf("%s is the package the bundle is made from (in the spool %s): write the bundle elsewhere", out, c.spool())
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	staging, err := scratch.MkdirTemp(filepath.Dir(out), ".ferry-bundle-")
	if err != nil {
		return nil, fmt.Errorf("make room for the bundle beside %s: %w", out, err)
	}
	defer staging.Remove()
	staged := filepath.Join(staging.Path, filepath.Base(out))
	if res.Delta, err = c.delta(ctx, want.Repository, want.Digest, have, staged); err != nil {
		return nil, err
	}
	if len(want.Values) > 0 {
		res.Values = out + ".values.json"
		if _, err := atomicfile.Write(res.Values, 0o644, func(w io.Writer) error {
			_, err := w.Write(append(want.Values, '\n'))
			return err
		}); err != nil {
			return nil, fmt.Errorf("write the values beside the bundle: %w", err)
		}
	}
	if err := os.Rename(staged, out); err != nil {
		return nil, fmt.Errorf("write the bundle: %w", err)
	}
	res.Delta.Path = out
	return res, nil
}

// sameFile tells whether the paths a and b name one file.
func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}
