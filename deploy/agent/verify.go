package agent

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/imagesig"
)

// Defaults of Verifier.
const (
	// DefaultVerifyTimeout bounds one image's check: the webhook has 10 s
	// for the whole Pod.
	DefaultVerifyTimeout = 5 * time.Second
	// DefaultVerifyCacheSize is how many decisions Verifier keeps.
	DefaultVerifyCacheSize = 1024
	// DefaultRefusalMaxAge is how long Verifier keeps a refusal: an
	// evidence layer the registry failed to serve is a refusal too.
	DefaultRefusalMaxAge = 10 * time.Second
)

// Repository is what Verifier reads an image's evidence from: a
// repository of the in-cluster registry (an oras-go remote.Repository;
// Predecessors lists referrers).
type Repository interface {
	content.Resolver
	content.ReadOnlyGraphStorage
}

// Verifier checks Pods' images against the signature policies their
// packages declared, with the evidence (signatures, attestations, Sigstore
// bundles) the package recorded for them (artifact.Image.Signatures),
// which deploy copied next to each image in the in-cluster registry. The
// decision is imagesig.Policy.Verify's; Verifier only reads and caches.
type Verifier struct {
	// Repository returns the registry repository at path (library/nginx).
	Repository func(ctx context.Context, path string) (Repository, error)
	// Timeout bounds one image's check; DefaultVerifyTimeout if 0.
	Timeout time.Duration
	// CacheSize bounds the decisions kept, by (image digest, policy,
	// evidence), least recently used out first; DefaultVerifyCacheSize if
	// 0, none if negative. Only verdicts are kept, never a registry error.
	CacheSize int
	// RefusalMaxAge: a refusal is decided again once older;
	// DefaultRefusalMaxAge if 0, never kept if negative. An admission is
	// kept until evicted.
	RefusalMaxAge time.Duration

	mu       sync.Mutex
	lru      *list.List // of *verdict, most recent first
	byKey    map[string]*list.Element
	inflight map[string]*call
}

// verdict is a cached decision.
type verdict struct {
	key string
	res *imagesig.Result
	err error
	at  time.Time
}

// PolicyError is a refusal: Image does not satisfy Policy. Err wraps
// imagesig.ErrNoSignature or ErrUnverified; or, when Op is set, the error
// that kept the policy from being checked (no verdict), e.g. reading the
// evidence from the registry.
type PolicyError struct {
	Image, Policy string
	Op            string
	Err           error
}

// Ops of a PolicyError that is no verdict.
const (
	OpRegistry = "reading its signatures from the registry"
	OpVerify   = "verifying"
)

func (e *PolicyError) Error() string {
	if e.Op != "" {
		return fmt.Sprintf("image %s: policy %q not checked: %s: %s", e.Image, e.Policy, e.Op, oneLine(e.Err))
	}
	return fmt.Sprintf("image %s does not satisfy policy %q: %s", e.Image, e.Policy, oneLine(e.Err))
}

func (e *PolicyError) Unwrap() error { return e.Err }

// oneLine keeps an error's message on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// Verify checks c: the Result of the subject that satisfied the policy
// when the image may run, else a *PolicyError; cached says the decision
// was kept from an earlier check. The decision is artifact.CheckImage's,
// as at create and in `package verify --images`: a signature over the
// image as stored, over the publisher's index the package kept some
// platforms of (its signed-index carrier, a referrer of the image, listing
// each), or over every platform manifest kept.
//
// Concurrent checks of the same image and policy (the Pods of one
// ReplicaSet) share one reading of the registry.
func (v *Verifier) Verify(ctx context.Context, c Check) (res *imagesig.Result, cached bool, err error) {
	key, err := verdictKey(c)
	if err != nil {
		return nil, false, err
	}
	v.mu.Lock()
	if vd := v.cachedLocked(key); vd != nil {
		v.mu.Unlock()
		return vd.res, true, named(vd.err, c)
	}
	if cl, ok := v.inflight[key]; ok {
		v.mu.Unlock()
		select {
		case <-cl.done:
			return cl.res, true, named(cl.err, c)
		case <-ctx.Done():
			return nil, false, &PolicyError{Image: c.Name(), Policy: c.Policy.Name, Op: OpVerify, Err: ctx.Err()}
		}
	}
	cl := &call{done: make(chan struct{})}
	if v.inflight == nil {
		v.inflight = map[string]*call{}
	}
	v.inflight[key] = cl
	v.mu.Unlock()

	vd, err := v.decide(ctx, c)
	if vd != nil {
		vd.key = key
		v.keep(vd)
		cl.res, cl.err = vd.res, vd.err
	} else {
		cl.err = err
	}
	v.mu.Lock()
	delete(v.inflight, key)
	v.mu.Unlock()
	close(cl.done)
	return cl.res, false, cl.err
}

// named gives a shared decision's refusal the name of the image c checks
// (the same content may be recorded under several references).
func named(err error, c Check) error {
	var pe *PolicyError
	if !errors.As(err, &pe) || pe.Image == c.Name() {
		return err
	}
	cp := *pe
	cp.Image = c.Name()
	return &cp
}

// call is a check in flight.
type call struct {
	done chan struct{}
	res  *imagesig.Result
	err  error
}

// timeout is Timeout or its default.
func (v *Verifier) timeout() time.Duration {
	if v.Timeout <= 0 {
		return DefaultVerifyTimeout
	}
	return v.Timeout
}

// decide reads the evidence and asks Policy.Verify: a verdict, or the
// error that kept it from one.
func (v *Verifier) decide(ctx context.Context, c Check) (*verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout())
	defer cancel()
	notChecked := func(op string, err error) error {
		return &PolicyError{Image: c.Name(), Policy: c.Policy.Name, Op: op, Err: err}
	}
	repo, err := v.Repository(ctx, c.Path)
	if err != nil {
		return nil, notChecked(OpRegistry, err)
	}
	// The package root's entries of the image, as the registry holds
	// them: the image, its evidence, and the signed-index carrier of an
	// index the package keeps only some platforms of.
	stored, err := repo.Resolve(ctx, c.Entry.Digest.String())
	if err != nil {
		return nil, notChecked(OpRegistry, fmt.Errorf("image %s: %w", c.Entry.Digest, err))
	}
	stored.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindImage}
	entries := []ocispec.Descriptor{stored}
	for _, s := range c.Entry.Signatures {
		desc, err := repo.Resolve(ctx, s.Digest.String())
		if err != nil {
			return nil, notChecked(OpRegistry, fmt.Errorf("%s %s: %w", s.Kind, s.Digest, err))
		}
		if desc.Digest != s.Digest {
			return nil, notChecked(OpRegistry, fmt.Errorf("%s %s: the registry answered %s", s.Kind, s.Digest, desc.Digest))
		}
		if s.ArtifactType != "" {
			desc.ArtifactType = s.ArtifactType
		}
		desc.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindImageSignature}
		entries = append(entries, desc)
	}
	if orig := c.Entry.OriginalDigest; orig != "" && orig != c.Entry.Digest && signs(c.Entry, orig) {
		carriers, err := artifact.Referrers(ctx, repo, stored, artifact.ArtifactTypeSignedIndex)
		if err != nil {
			return nil, notChecked(OpRegistry, fmt.Errorf("the signed index %s: %w", orig, err))
		}
		for _, d := range carriers {
			d.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindImageSignature, artifact.AnnotationSignedIndex: orig.String()}
			entries = append(entries, d)
		}
	}
	res, err := artifact.CheckImage(ctx, repo, c.Policy, c.Entry, entries)
	switch {
	case err == nil:
		return &verdict{at: time.Now(), res: res}, nil
	case errors.Is(err, imagesig.ErrNoSignature), errors.Is(err, imagesig.ErrUnverified):
		return &verdict{at: time.Now(), err: &PolicyError{Image: c.Name(), Policy: c.Policy.Name, Err: err}}, nil
	}
	// No verdict: the evidence could not be read, or time ran out.
	return nil, notChecked(OpVerify, err)
}

// signs reports whether img's package recorded evidence over subject.
func signs(img artifact.Image, subject digest.Digest) bool {
	for _, s := range img.Signatures {
		if s.Subject == subject {
			return true
		}
	}
	return false
}

// verdictKey identifies what a decision depends on: the image's digest,
// the policy and the evidence recorded for it, each by its digest.
func verdictKey(c Check) (string, error) {
	p, err := json.Marshal(c.Policy)
	if err != nil {
		return "", err
	}
	e, err := json.Marshal(c.Entry.Signatures)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %x %x", c.Entry.Digest, sha256.Sum256(p), sha256.Sum256(e)), nil
}

func (v *Verifier) size() int {
	if v.CacheSize == 0 {
		return DefaultVerifyCacheSize
	}
	return v.CacheSize
}

func (v *Verifier) cached(key string) *verdict {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cachedLocked(key)
}

func (v *Verifier) cachedLocked(key string) *verdict {
	e, ok := v.byKey[key]
	if !ok {
		return nil
	}
	if vd := e.Value.(*verdict); vd.err != nil {
		age := v.RefusalMaxAge
		if age == 0 {
			age = DefaultRefusalMaxAge
		}
		if age < 0 || time.Since(vd.at) >= age {
			v.lru.Remove(e)
			delete(v.byKey, key)
			return nil
		}
	}
	v.lru.MoveToFront(e)
	return e.Value.(*verdict)
}

func (v *Verifier) keep(vd *verdict) {
	n := v.size()
	if n <= 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lru == nil {
		v.lru, v.byKey = list.New(), map[string]*list.Element{}
	}
	if e, ok := v.byKey[vd.key]; ok {
		e.Value = vd
		v.lru.MoveToFront(e)
		return
	}
	v.byKey[vd.key] = v.lru.PushFront(vd)
	for v.lru.Len() > n {
		old := v.lru.Back()
		v.lru.Remove(old)
		delete(v.byKey, old.Value.(*verdict).key)
	}
}

// Len is how many decisions v keeps.
func (v *Verifier) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lru == nil {
		return 0
	}
	return v.lru.Len()
}
