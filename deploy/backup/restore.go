package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"oras.land/oras-go/v2/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// Target is what a restore writes into: a registry (the in-cluster one,
// empty after `ferry init`), and the cluster API for the keys and Packages.
type Target struct {
	Registry registry.Registry
	// Client writes Secrets, ConfigMaps and Packages and watches the
	// Packages; nil restores the registry alone.
	Client client.WithWatch
}

// RestoreOptions configures Restore. The zero value restores without
// checking a signature (every blob is still checked against its digest:
// the registry commits it under that digest and refuses other bytes, and
// the manifests are hashed as they are read) and waits for every Package.
type RestoreOptions struct {
	// Keys, if set, require each backup to be signed by one of them,
	// checked (and every blob hashed once, in one pass over the file)
	// before anything is written.
	Keys []artifact.Verifier
	// NoWait returns once the Packages are applied, without waiting for
	// them to be Ready.
	NoWait bool
	// Progress, if set, hears of each blob pushed (PhasePush).
	Progress artifact.ProgressFunc
	// Seen, if set, hears of each condition of a Package as it changes.
	Seen func(pkg string, c metav1.Condition)
}

// RestoreResult tells what Restore did.
type RestoreResult struct {
	// Backups are the backups restored, in chain order.
	Backups      []string `json:"backups"`
	Repositories int      `json:"repositories"`
	Tags         int      `json:"tags"`
	// Pushed blobs were uploaded, Mounted ones mounted from another
	// repository of the registry, Held ones there already.
	Pushed     int      `json:"pushed"`
	PushedSize int64    `json:"pushedSize"`
	Mounted    int      `json:"mounted"`
	Held       int      `json:"held"`
	Keys       int      `json:"keys"`
	Packages   []string `json:"packages"`
	Ready      []string `json:"ready"`
}

// ErrMissingLink means a backup of the chain is not among those given.
var ErrMissingLink = errors.New("a backup of the chain is missing")

// Chain orders backups as they extend one another: the full backup first,
// then each that extends the one before. A backup whose base is not given
// is an ErrMissingLink naming the base.
func Chain(infos []*Info) ([]*Info, error) {
	left := append([]*Info(nil), infos...)
	var out []*Info
	for len(left) > 0 {
		next := -1
		for i, in := range left {
			b := in.Record.Base
			switch {
			case len(out) == 0 && b == nil,
				len(out) > 0 && b != nil && (b.Root == out[len(out)-1].Root || b.Root == ""):
				next = i
			}
			if next >= 0 {
				break
			}
		}
		if next < 0 {
			for _, in := range left {
				if b := in.Record.Base; b != nil {
					return nil, fmt.Errorf("%w: %s extends %s, made %s, which is not given: pass it first", ErrMissingLink, in.Name, baseName(b), b.Created)
				}
			}
			return nil, fmt.Errorf("%w: %s and %s are both full backups: restore one", ErrMissingLink, out[0].Name, left[0].Name)
		}
		out = append(out, left[next])
		left = append(left[:next], left[next+1:]...)
	}
	return out, nil
}

// Restore restores backups (files) into dst: the chain ordered (Chain),
// each backup checked (its signature with opts.Keys, every blob against its
// digest), every blob pushed (sent from the file, restoreStreams at a time)
// or mounted into each repository that held it and then every manifest by
// digest, then the tags; then the keys
// and Packages of the last backup applied, and each Package waited for
// until it is Ready (deploy.WaitPackage).
func Restore(ctx context.Context, dst Target, paths []string, opts RestoreOptions) (*RestoreResult, error) {
	var infos []*Info
	for _, p := range paths {
		in, err := ReadInfoFile(p)
		if err != nil {
			return nil, err
		}
		infos = append(infos, in)
	}
	chain, err := Chain(infos)
	if err != nil {
		return nil, err
	}
	rs := &restorer{dst: dst, opts: opts, have: map[digest.Digest]string{}, res: &RestoreResult{}}
	for _, in := range chain {
		if err := rs.restore(ctx, in); err != nil {
			if !strings.Contains(err.Error(), in.Name) {
				err = fmt.Errorf("%s: %w", in.Name, err)
			}
			return nil, err
		}
		rs.res.Backups = append(rs.res.Backups, in.Name)
	}
	last := chain[len(chain)-1].Record
	rs.res.Repositories = len(last.Repositories)
	for _, r := range last.Repositories {
		rs.res.Tags += len(r.Tags)
	}
	if dst.Client != nil {
		if err := rs.apply(ctx, last); err != nil {
			return rs.res, err
		}
	}
	return rs.res, nil
}

type restorer struct {
	dst  Target
	opts RestoreOptions
	// mu guards have, res and opts.Progress while blobs go up side by side.
	mu sync.Mutex
	// have names a repository that holds each blob restored so far.
	have map[digest.Digest]string
	res  *RestoreResult
}

// restoreStreams is how many large blobs a restore uploads at once: one is
// read from the backup file while the registry hashes and writes the other.
// smallStreams more go up beside them, blobs under smallBlob bytes: a
// registry that fsyncs each blob it commits takes about as long over a
// config of 100 bytes as over a layer of 30 MiB when the disk is busy.
const restoreStreams = 2

const (
	smallStreams = 4
	smallBlob    = 1 << 20
)

func (rs *restorer) repo(ctx context.Context, name string) (registry.Repository, error) {
	return rs.dst.Registry.Repository(ctx, name)
}

// restore restores one backup of the chain into the registry.
func (rs *restorer) restore(ctx context.Context, in *Info) error {
	r, err := artifact.Open(ctx, in.Name)
	if err != nil {
		return err
	}
	if r.Config() == nil || r.Config().Name != PackageName || r.Root().Digest != in.Root {
		return fmt.Errorf("%w: its package is %.64q", ErrNotBackup, r.Config().Name)
	}
	if len(rs.opts.Keys) > 0 {
		if _, err := artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: rs.opts.Keys}); err != nil {
			return err
		}
	}
	rec := in.Record
	idx := make(map[digest.Digest]int, len(rec.Blobs))
	for i, b := range rec.Blobs {
		idx[b.Digest] = i
	}
	f, err := os.Open(in.Name)
	if err != nil {
		return err
	}
	defer f.Close()
	spans, err := scanBlobs(f, func(d digest.Digest) bool { _, ok := idx[d]; return ok })
	if err != nil {
		return err
	}
	// The blobs go up in two lanes, each sent from the file: large ones
	// restoreStreams at a time, small ones (whose time is the registry's
	// fsyncs, not bytes) smallStreams at a time beside them; the manifests,
	// once every blob is there, in stored order (children before parents),
	// as a registry takes them.
	done := map[[2]any]bool{}
	var manifests []span
	var blobs [2][]span // large, small
	for _, s := range spans {
		b := rec.Blobs[idx[s.digest]]
		if s.size != b.Size {
			return fmt.Errorf("%w: blob %s is %d bytes, the record says %d", artifact.ErrCorrupt, b.Digest, s.size, b.Size)
		}
		for _, ri := range b.Repos {
			done[[2]any{b.Digest, ri}] = true
		}
		switch {
		case b.MediaType != "":
			manifests = append(manifests, s)
		case s.size < smallBlob:
			blobs[1] = append(blobs[1], s)
		default:
			blobs[0] = append(blobs[0], s)
		}
	}
	// Every manifest is read and checked (size, digest, JSON) before
	// anything is pushed: a backup refused for one leaves the registry as
	// it was.
	levels, err := manifestLevels(f, rec, idx, manifests)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	for lane, limit := range [2]int{restoreStreams, smallStreams} {
		g.Go(func() error {
			lg, lctx := errgroup.WithContext(gctx)
			lg.SetLimit(limit)
			for _, s := range blobs[lane] {
				if lctx.Err() != nil {
					break
				}
				b := rec.Blobs[idx[s.digest]]
				lg.Go(func() error { return rs.putBlob(lctx, rec, b, &fileSpan{f: f, off: s.off, n: s.size}) })
			}
			return lg.Wait()
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := rs.putManifests(ctx, f, rec, idx, levels); err != nil {
		return err
	}
	// What the backup left to its base, into the repositories that lack it.
	for _, b := range rec.Blobs {
		for _, ri := range b.Repos {
			if done[[2]any{b.Digest, ri}] {
				continue
			}
			if err := rs.complete(ctx, rec, b, ri); err != nil {
				return err
			}
		}
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(smallStreams)
	for _, repo := range rec.Repositories {
		dst, err := rs.repo(ctx, repo.Name)
		if err != nil {
			return err
		}
		for tag, d := range repo.Tags {
			b, ok := idx[d]
			if !ok {
				return errors.Join(g.Wait(), fmt.Errorf("%w: tag %s:%s names %s, which the record does not list", ErrNotBackup, repo.Name, tag, d))
			}
			desc := ocispec.Descriptor{MediaType: rec.Blobs[b].MediaType, Digest: d, Size: rec.Blobs[b].Size}
			g.Go(func() error {
				if err := dst.Tag(gctx, desc, tag); err != nil {
					return fmt.Errorf("tag %s:%s: %w", repo.Name, tag, err)
				}
				return nil
			})
		}
	}
	return g.Wait()
}

// readManifest reads the manifest b at span s of f, checked against its
// size bound and digest.
func readManifest(f *os.File, b Blob, s span) ([]byte, error) {
	if b.Size > artifact.MaxManifestSize {
		return nil, fmt.Errorf("%w: manifest %s is %d bytes, more than %d", artifact.ErrCorrupt, b.Digest, b.Size, artifact.MaxManifestSize)
	}
	data := make([]byte, b.Size)
	if _, err := f.ReadAt(data, s.off); err != nil {
		return nil, fmt.Errorf("%w: manifest %s: %w", artifact.ErrCorrupt, b.Digest, err)
	}
	if digest.FromBytes(data) != b.Digest {
		return nil, fmt.Errorf("%w: blob %s does not match its digest", artifact.ErrCorrupt, b.Digest)
	}
	return data, nil
}

// manifestLevels reads and checks the manifests the backup carries (spans
// of f) and orders them in levels: each after every manifest it names and
// after its subject (a registry refuses an index whose children it lacks;
// the file holds children first). A manifest that names one later in the
// file (none can name itself or one naming it: digests) is not held back
// for it, as the file's order did not before. One manifest at a time is
// held in memory.
func manifestLevels(f *os.File, rec *Record, idx map[digest.Digest]int, spans []span) ([][]span, error) {
	level := make(map[digest.Digest]int, len(spans))
	var levels [][]span
	for _, s := range spans {
		if _, ok := level[s.digest]; ok {
			continue // in the file twice: pushed once
		}
		b := rec.Blobs[idx[s.digest]]
		data, err := readManifest(f, b, s)
		if err != nil {
			return nil, err
		}
		kids, err := children(b.MediaType, data)
		if err != nil {
			return nil, fmt.Errorf("%w: manifest %s: %w", artifact.ErrCorrupt, b.Digest, err)
		}
		var sub struct{ Subject *ocispec.Descriptor }
		if json.Unmarshal(data, &sub) == nil && sub.Subject != nil {
			kids = append(kids, *sub.Subject) // a referrer after its subject, as before
		}
		n := 0
		for _, k := range kids {
			if l, ok := level[k.Digest]; ok {
				n = max(n, l+1)
			}
		}
		level[b.Digest] = n
		if n == len(levels) {
			levels = append(levels, nil)
		}
		levels[n] = append(levels[n], s)
	}
	return levels, nil
}

// putManifests pushes the manifests in levels (of manifestLevels), once
// every blob is there: level by level, those of one level smallStreams at
// a time, each read again from f.
func (rs *restorer) putManifests(ctx context.Context, f *os.File, rec *Record, idx map[digest.Digest]int, levels [][]span) error {
	for _, l := range levels {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(smallStreams)
		for _, s := range l {
			g.Go(func() error {
				b := rec.Blobs[idx[s.digest]]
				data, err := readManifest(f, b, s)
				if err != nil {
					return err
				}
				return rs.putManifest(gctx, rec, b, data)
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return nil
}

func (rs *restorer) putManifest(ctx context.Context, rec *Record, b Blob, data []byte) error {
	desc := ocispec.Descriptor{MediaType: mediaTypeOf(b), Digest: b.Digest, Size: b.Size}
	for _, ri := range b.Repos {
		name := rec.Repositories[ri].Name
		dst, err := rs.repo(ctx, name)
		if err != nil {
			return err
		}
		if err := dst.Push(ctx, desc, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("push manifest %s to %s: %w", b.Digest, name, err)
		}
		rs.mu.Lock()
		rs.have[b.Digest] = name
		rs.mu.Unlock()
	}
	rs.record(func(r *RestoreResult) { r.Pushed++; r.PushedSize += b.Size })
	rs.progress(desc)
	return nil
}

// putBlob pushes a blob the backup carries (body, its bytes) into the
// first repository that held it, and mounts it into the others. It runs
// beside other putBlobs: what it records, it records under rs.mu.
func (rs *restorer) putBlob(ctx context.Context, rec *Record, b Blob, body io.Reader) error {
	desc := ocispec.Descriptor{MediaType: mediaTypeOf(b), Digest: b.Digest, Size: b.Size}
	for n, ri := range b.Repos {
		name := rec.Repositories[ri].Name
		dst, err := rs.repo(ctx, name)
		if err != nil {
			return err
		}
		if ok, err := dst.Exists(ctx, desc); err == nil && ok {
			rs.record(func(r *RestoreResult) { r.Held++ })
		} else if n == 0 {
			if err := dst.Push(ctx, desc, body); err != nil {
				if refusedDigest(err) {
					return fmt.Errorf("%w: blob %s does not match its digest", artifact.ErrCorrupt, b.Digest)
				}
				return fmt.Errorf("push %s to %s: %w", b.Digest, name, err)
			}
			rs.record(func(r *RestoreResult) { r.Pushed++; r.PushedSize += b.Size })
			rs.progress(desc)
		} else if err := rs.mount(ctx, dst, desc, rs.holder(b.Digest)); err != nil {
			return err
		}
		if n == 0 {
			rs.mu.Lock()
			rs.have[b.Digest] = name
			rs.mu.Unlock()
		}
	}
	return nil
}

// record changes the result under rs.mu.
func (rs *restorer) record(f func(*RestoreResult)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	f(rs.res)
}

// holder is a repository that holds blob d, restored so far.
func (rs *restorer) holder(d digest.Digest) string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.have[d]
}

// progress reports a blob pushed.
func (rs *restorer) progress(desc ocispec.Descriptor) {
	if rs.opts.Progress == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.opts.Progress(artifact.Progress{Phase: artifact.PhasePush, Desc: desc, Bytes: desc.Size})
}

// complete brings a blob the backup left to its base into repository ri:
// there already, or mounted (a manifest: fetched and pushed) from where an
// earlier backup of the chain put it.
func (rs *restorer) complete(ctx context.Context, rec *Record, b Blob, ri int) error {
	name := rec.Repositories[ri].Name
	desc := ocispec.Descriptor{MediaType: mediaTypeOf(b), Digest: b.Digest, Size: b.Size}
	dst, err := rs.repo(ctx, name)
	if err != nil {
		return err
	}
	if ok, err := dst.Exists(ctx, desc); err == nil && ok {
		rs.res.Held++
		rs.have[b.Digest] = name
		return nil
	}
	from, ok := rs.have[b.Digest]
	if !ok {
		return fmt.Errorf("%w: blob %s of %s is in none of the backups given (it is left to %s)", ErrMissingLink, b.Digest, name, baseName(rec.Base))
	}
	if b.MediaType == "" {
		return rs.mount(ctx, dst, desc, from)
	}
	src, err := rs.repo(ctx, from)
	if err != nil {
		return err
	}
	data, err := artifact.FetchManifest(ctx, src, desc)
	if err != nil {
		return err
	}
	if err := dst.Push(ctx, desc, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("push manifest %s to %s: %w", b.Digest, name, err)
	}
	rs.res.Pushed++
	return nil
}

// mount mounts a blob into dst from repository from of the same registry.
func (rs *restorer) mount(ctx context.Context, dst registry.Repository, desc ocispec.Descriptor, from string) error {
	m, ok := dst.(registry.Mounter)
	if !ok || from == "" {
		return fmt.Errorf("blob %s: the registry cannot mount it", desc.Digest)
	}
	if err := m.Mount(ctx, desc, from, nil); err != nil {
		return fmt.Errorf("mount %s from %s: %w", desc.Digest, from, err)
	}
	rs.record(func(r *RestoreResult) { r.Mounted++ })
	return nil
}

// apply creates the keys and applies the Packages of rec, then waits for
// each Package to be Ready.
func (rs *restorer) apply(ctx context.Context, rec *Record) error {
	c := rs.dst.Client
	for _, k := range rec.Keys {
		meta := metav1.ObjectMeta{Name: k.Name, Namespace: k.Namespace, Labels: k.Labels}
		var obj client.Object
		if k.Kind == "ConfigMap" {
			obj = &corev1.ConfigMap{ObjectMeta: meta, Data: k.Data}
		} else {
			data := map[string][]byte{}
			for n, v := range k.Data {
				data[n] = []byte(v)
			}
			obj = &corev1.Secret{ObjectMeta: meta, Data: data}
		}
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create key %s %s/%s: %w", k.Kind, k.Namespace, k.Name, err)
		}
		rs.res.Keys++
	}
	type applied struct {
		pkg     *v1alpha1.Package
		request string
	}
	var all []applied
	for _, p := range rec.Packages {
		pkg, request, err := deploy.ApplyPackage(ctx, c, p.Namespace, p.Name, p.Spec, p.Labels)
		if err != nil {
			return err
		}
		rs.res.Packages = append(rs.res.Packages, p.Name)
		all = append(all, applied{pkg, request})
	}
	if rs.opts.NoWait {
		return nil
	}
	for _, a := range all {
		name := a.pkg.Name
		_, err := deploy.WaitPackage(ctx, c, a.pkg, a.request, func(cond metav1.Condition) {
			if rs.opts.Seen != nil {
				rs.opts.Seen(name, cond)
			}
		})
		if err != nil {
			return err
		}
		rs.res.Ready = append(rs.res.Ready, name)
	}
	return nil
}
