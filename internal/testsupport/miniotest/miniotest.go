// Package miniotest runs a real S3-compatible object store for tests: the
// MinIO server that `make deps` builds from tools/minio/go.mod into .bin/,
// on a free loopback port, over a temporary folder, stopped when the test
// ends.
package miniotest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go/aws"
	"github.com/aws/aws-sdk-go/aws/credentials"
	"github.com/aws/aws-sdk-go/aws/session"
	"github.com/aws/aws-sdk-go/service/s3"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry"
)

// Server is a running MinIO.
type Server struct {
	// Endpoint is its URL, http://127.0.0.1:<port>.
	Endpoint string
	// AccessKey and SecretKey are its root credentials.
	AccessKey, SecretKey string
	// Dir is the folder it stores objects in.
	Dir string

	client *s3.S3
}

// Start runs MinIO for the test (skipped, or failed with
// FERRY_REQUIRE_TOOLS=1, when the binary is not built).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := peertool.Require(t, "minio")
	dir := t.TempDir()
	s := &Server{AccessKey: "ferrytest", SecretKey: randomHex(t, 16), Dir: filepath.Join(dir, "data")}
	var lastErr error
	for range 3 { // the free port may be taken before MinIO listens on it
		addr := freeAddr(t)
		s.Endpoint = "http://" + addr
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "server", "--quiet", "--address", addr, "--console-address", freeAddr(t), s.Dir)
		cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
			"MINIO_BROWSER=off", "MINIO_UPDATE=off", "HOME="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatalf("miniotest: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() { cancel(); <-exited }
		if lastErr = waitLive(s.Endpoint, exited); lastErr == nil {
			t.Cleanup(stop)
			s.client = s3Client(s.Endpoint, s.AccessKey, s.SecretKey)
			return s
		}
		stop()
		lastErr = fmt.Errorf("%w: %s", lastErr, strings.TrimSpace(out.String()))
	}
	t.Fatalf("miniotest: start MinIO: %v", lastErr)
	return nil
}

// Bucket makes a new bucket and returns registry storage on it, with the
// server's credentials, path-style addressing and prefix "ferry".
func (s *Server) Bucket(t testing.TB) *registry.S3 {
	t.Helper()
	name := "ferry-" + randomHex(t, 6)
	if _, err := s.client.CreateBucket(&s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("miniotest: create bucket %s: %v", name, err)
	}
	return &registry.S3{
		Bucket: name, Prefix: "ferry", Endpoint: s.Endpoint, PathStyle: true,
		AccessKey: s.AccessKey, SecretKey: s.SecretKey,
	}
}

// Env is the environment a child process (ferry registry serve) finds the
// server's credentials in.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey}
}

// Usage sums the sizes of the objects in bucket.
func (s *Server) Usage(t testing.TB, bucket string) int64 {
	t.Helper()
	var n int64
	err := s.client.ListObjectsV2Pages(&s3.ListObjectsV2Input{Bucket: aws.String(bucket)}, func(p *s3.ListObjectsV2Output, _ bool) bool {
		for _, o := range p.Contents {
			n += aws.Int64Value(o.Size)
		}
		return true
	})
	if err != nil {
		t.Fatalf("miniotest: list %s: %v", bucket, err)
	}
	return n
}

func s3Client(endpoint, key, secret string) *s3.S3 {
	sess := session.Must(session.NewSession(aws.NewConfig().
		WithEndpoint(endpoint).WithRegion(registry.DefaultS3Region).WithS3ForcePathStyle(true).
		WithCredentials(credentials.NewStaticCredentials(key, secret, ""))))
	return s3.New(sess)
}

// waitLive polls MinIO's liveness endpoint for up to 30 s.
func waitLive(endpoint string, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("MinIO exited")
		default:
		}
		resp, err := http.Get(endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("MinIO at %s not ready after 30s", endpoint)
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}
