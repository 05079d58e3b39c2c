package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/agent"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/unreachable"
)

// Labels of the Secrets that record deployed packages, besides
// cluster.LabelManagedBy.
const (
	LabelPackage = cluster.LabelPackage
	recordPrefix = "ferry-package-"
	recordKey    = "record.json"
	configKey    = artifact.ConfigFileName
)

// Record is what Apply recorded for one deployed package.
type Record struct {
	Name       string        `json:"name"`
	Version    string        `json:"version"`
	Root       digest.Digest `json:"root"`
	Components []string      `json:"components"`
	// Releases are the Helm releases deploy installed from its charts.
	Releases []Release `json:"releases,omitempty"`
	// Objects are what deploy applied from its manifests.
	Objects []Object `json:"objects,omitempty"`
	// Earlier are the images (repository@digest, in the in-cluster
	// registry) of earlier versions of the package that this one no longer
	// has: kept for Helm rollbacks, deleted by remove.
	Earlier []string `json:"earlier,omitempty"`
	// BytesPushed is what the deploy that made this record uploaded to the
	// in-cluster registry (0 when it had every blob).
	BytesPushed int64 `json:"bytesPushed"`
	// PushTook is how long that deploy took to push (not recorded).
	PushTook time.Duration `json:"-"`
	// Config is the package's ferry.json, whose image digests the agent uses.
	Config *artifact.Config `json:"-"`
}

// RecordSecret is the name of the Secret of ferry's namespace that holds
// the record of package name.
func RecordSecret(name string) string { return recordPrefix + name }

// State reads and writes the records in a namespace.
type State struct {
	Client    kubernetes.Interface
	Namespace string
}

// Save records rec (replacing an earlier record of the same package).
func (s *State) Save(ctx context.Context, rec *Record) error {
	meta, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	cfg, err := json.Marshal(rec.Config)
	if err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: recordPrefix + rec.Name, Namespace: s.Namespace,
			Labels: map[string]string{cluster.LabelManagedBy: cluster.ManagedBy, LabelPackage: rec.Name},
		},
		Data: map[string][]byte{recordKey: meta, configKey: cfg},
	}
	c := s.Client.CoreV1().Secrets(s.Namespace)
	cur, err := c.Get(ctx, sec.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(ctx, sec, metav1.CreateOptions{})
	case err == nil:
		cur.Data, cur.Labels = sec.Data, sec.Labels
		_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("record package %s: %w", rec.Name, err)
	}
	return nil
}

// Get returns the record of package name, or nil when there is none.
func (s *State) Get(ctx context.Context, name string) (*Record, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, recordPrefix+name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of package %s: %w", name, err)
	}
	return decodeRecord(sec)
}

// List returns every recorded package, by name.
func (s *State) List(ctx context.Context) ([]*Record, error) {
	list, err := s.Client.CoreV1().Secrets(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelPackage})
	if err != nil {
		return nil, fmt.Errorf("list deployed packages: %w", unreachable.Said(err))
	}
	var out []*Record
	for i := range list.Items {
		rec, err := decodeRecord(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func decodeRecord(sec *corev1.Secret) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(sec.Data[recordKey], &rec); err != nil {
		return nil, fmt.Errorf("record %s: %w", sec.Name, err)
	}
	rec.Config = &artifact.Config{}
	if err := json.Unmarshal(sec.Data[configKey], rec.Config); err != nil {
		return nil, fmt.Errorf("record %s: %s: %w", sec.Name, configKey, err)
	}
	return &rec, nil
}

// Delete forgets the record of package name.
func (s *State) Delete(ctx context.Context, name string) error {
	err := s.Client.CoreV1().Secrets(s.Namespace).Delete(ctx, recordPrefix+name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("forget package %s: %w", name, err)
	}
	return nil
}

// Repositories gives the git repositories deployed packages carry, for
// the agent's rewrite of GitOps sources.
func (s *State) Repositories(ctx context.Context) (agent.Repositories, error) {
	recs, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	repos := agent.Repositories{}
	for _, r := range recs {
		repos.Add(r.Config)
	}
	return repos, nil
}

// Packages gives the configs of every recorded package, for the agent
// (agent.Source).
func (s *State) Packages(ctx context.Context) ([]*artifact.Config, error) {
	recs, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*artifact.Config, len(recs))
	for i, r := range recs {
		out[i] = r.Config
	}
	return out, nil
}

// Images gathers the images every recorded package holds.
func (s *State) Images(ctx context.Context) (agent.Images, error) {
	recs, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	images := agent.Images{}
	for _, r := range recs {
		if err := images.Add(r.Config); err != nil {
			return nil, err
		}
	}
	return images, nil
}
