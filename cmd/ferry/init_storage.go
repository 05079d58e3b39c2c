package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/registry"
)

// initStorageFlags choose the in-cluster registry's storage.
type initStorageFlags struct {
	storage     string
	credentials string
	caFile      string
	replicas    int
	migrate     bool
}

func (f *initStorageFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.storage, "storage", "", "S3-compatible storage for the registry, s3://bucket[/prefix]?endpoint=URL&region=R&path-style=true (default: the filesystem of one node, --storage-dir)")
	cmd.Flags().StringVar(&f.credentials, "storage-credentials", "", "Secret in the namespace with the S3 credentials (keys "+cluster.AccessKeyIDKey+", "+cluster.SecretAccessKeyKey+")")
	cmd.Flags().StringVar(&f.caFile, "storage-ca", "", "PEM file of the CA the S3 endpoint's certificate chains to")
	cmd.Flags().IntVar(&f.replicas, "replicas", 0, fmt.Sprintf("registry Pods (default 1 on the filesystem, %d on S3)", inject.DefaultS3Replicas))
	cmd.Flags().BoolVar(&f.migrate, "migrate", false, "moving the registry from its node's filesystem to --storage: copy every repository there first and verify every blob (the registry serves pulls meanwhile)")
}

// check validates the flags and, for S3, proves the bucket usable with the
// Secret's credentials from here before init changes anything: a wrong
// endpoint, bucket or key fails in one line, which never shows the secret.
// An endpoint this machine can not reach (an object store inside the
// air-gapped cluster, a workstation outside) is checked by the registry
// Pods instead, which refuse to start on a storage they can not use; the
// returned note says so.
func (f *initStorageFlags) check(ctx context.Context, cs kubernetes.Interface, ns string) (*inject.S3Storage, int32, string, error) {
	if f.replicas < 0 {
		return nil, 0, "", fmt.Errorf("--replicas %d: want at least 1", f.replicas)
	}
	if f.storage == "" {
		if f.credentials != "" || f.caFile != "" {
			return nil, 0, "", fmt.Errorf("--storage-credentials and --storage-ca need --storage s3://…")
		}
		return nil, int32(f.replicas), "", nil
	}
	s3, err := registry.ParseS3URL(f.storage)
	if err != nil {
		return nil, 0, "", fmt.Errorf("--storage: %w", err)
	}
	if f.credentials == "" {
		return nil, 0, "", fmt.Errorf("--storage %s needs --storage-credentials SECRET (keys %s, %s in namespace %s)", s3, cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey, ns)
	}
	st := &inject.S3Storage{URL: s3.String(), CredentialsSecret: f.credentials}
	if f.caFile != "" {
		if st.CABundle, err = confine.ReadPath(f.caFile, cli.MaxCABundleSize); err != nil {
			return nil, 0, "", fmt.Errorf("--storage-ca: %w", err)
		}
		// The AWS SDK reads a custom CA from this variable only.
		if err := os.Setenv("AWS_CA_BUNDLE", f.caFile); err != nil {
			return nil, 0, "", err
		}
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, f.credentials, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, 0, "", fmt.Errorf("--storage-credentials: Secret %s not found in namespace %s (create it with keys %s and %s)", f.credentials, ns, cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey)
	}
	if err != nil {
		return nil, 0, "", fmt.Errorf("--storage-credentials: %w", err)
	}
	s3.AccessKey, s3.SecretKey = string(sec.Data[cluster.AccessKeyIDKey]), string(sec.Data[cluster.SecretAccessKeyKey])
	if s3.AccessKey == "" || s3.SecretKey == "" {
		return nil, 0, "", fmt.Errorf("--storage-credentials: Secret %s needs both %s and %s", f.credentials, cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey)
	}
	if addr := endpointAddr(s3); addr != "" {
		conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return st, int32(f.replicas), fmt.Sprintf("%s not reachable from here (%v): the registry Pods check the bucket", addr, err), nil
		}
		conn.Close()
	}
	if err := registry.CheckStorage(ctx, registry.Config{S3: s3}); err != nil {
		return nil, 0, "", err
	}
	return st, int32(f.replicas), "bucket checked from here", nil
}

// endpointAddr is host:port of the storage's endpoint, "" for AWS itself.
func endpointAddr(s3 *registry.S3) string {
	u, err := url.Parse(s3.Endpoint)
	if s3.Endpoint == "" || err != nil {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "http" {
		return net.JoinHostPort(u.Hostname(), "80")
	}
	return net.JoinHostPort(u.Hostname(), "443")
}
