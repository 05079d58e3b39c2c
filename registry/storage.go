package registry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
)

// S3 is an S3-compatible object store that holds the registry's storage,
// through distribution's own s3-aws driver. Every registry (process or
// replica) configured with the same bucket and prefix serves the same
// content: the blobs and manifests, and ferry's own side records (digest
// aliases, the referrers index, the maintenance flag) that live beside them.
type S3 struct {
	// Bucket is the bucket's name (required).
	Bucket string
	// Prefix is the key prefix under which everything is stored; empty
	// means the bucket's root.
	Prefix string
	// Region is the bucket's region; DefaultS3Region if empty.
	Region string
	// Endpoint is the object store's URL, http:// or https:// (MinIO, Ceph,
	// any S3-compatible store); empty means AWS S3 itself.
	Endpoint string
	// PathStyle addresses the bucket as <endpoint>/<bucket>/ rather than
	// <bucket>.<endpoint>/: what most self-hosted stores need.
	PathStyle bool
	// AccessKey and SecretKey are the credentials. Empty: the AWS SDK's
	// default chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, then
	// AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials). A custom CA for
	// the endpoint comes from AWS_CA_BUNDLE, which the SDK reads itself.
	AccessKey string
	SecretKey string
}

// DefaultS3Region is the region S3 storage signs requests for when none is
// given (self-hosted stores mostly ignore it).
const DefaultS3Region = "us-east-1"

// ParseS3URL parses s3://bucket[/prefix][?endpoint=URL&region=R&path-style=BOOL].
// It refuses credentials in the URL: they belong in the environment or a
// credentials file, not in a command line.
func ParseS3URL(s string) (*S3, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("storage %q: %w", s, err)
	}
	if u.Scheme != "s3" {
		return nil, fmt.Errorf("storage %q: want s3://bucket[/prefix]", s)
	}
	if u.User != nil {
		return nil, fmt.Errorf("storage s3://%s: credentials do not belong in the URL (use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)", u.Host)
	}
	st := &S3{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	for k, v := range u.Query() {
		val := v[len(v)-1]
		switch k {
		case "endpoint":
			st.Endpoint = val
		case "region":
			st.Region = val
		case "path-style":
			if st.PathStyle, err = strconv.ParseBool(val); err != nil {
				return nil, fmt.Errorf("storage s3://%s: path-style=%q: want true or false", u.Host, val)
			}
		default:
			return nil, fmt.Errorf("storage s3://%s: unknown parameter %q (want endpoint, region, path-style)", u.Host, k)
		}
	}
	if err := st.validate(); err != nil {
		return nil, err
	}
	return st, nil
}

// String is the storage's URL, without credentials.
func (s *S3) String() string {
	u := url.URL{Scheme: "s3", Host: s.Bucket, Path: "/" + s.Prefix}
	if s.Prefix == "" {
		u.Path = ""
	}
	q := url.Values{}
	if s.Endpoint != "" {
		q.Set("endpoint", s.Endpoint)
	}
	if s.Region != "" {
		q.Set("region", s.Region)
	}
	if s.PathStyle {
		q.Set("path-style", "true")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (s *S3) validate() error {
	if s.Bucket == "" {
		return errors.New("storage s3: no bucket")
	}
	if s.Endpoint != "" {
		u, err := url.Parse(s.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("storage s3://%s: endpoint %q: want http://host[:port] or https://host[:port]", s.Bucket, s.Endpoint)
		}
	}
	if (s.AccessKey == "") != (s.SecretKey == "") {
		return fmt.Errorf("storage s3://%s: an access key needs a secret key and the other way round", s.Bucket)
	}
	return nil
}

// storageDriver names distribution's driver for c's storage and its
// parameters.
func (c Config) storageDriver() (string, configuration.Parameters) {
	switch {
	case c.S3 != nil:
		region := c.S3.Region
		if region == "" {
			region = DefaultS3Region
		}
		p := configuration.Parameters{
			"bucket":         c.S3.Bucket,
			"region":         region,
			"forcepathstyle": c.S3.PathStyle,
			"secure":         !strings.HasPrefix(c.S3.Endpoint, "http://"),
			"rootdirectory":  "/" + strings.Trim(c.S3.Prefix, "/"),
		}
		if c.S3.Endpoint != "" {
			p["regionendpoint"] = c.S3.Endpoint
		}
		if c.S3.AccessKey != "" {
			p["accesskey"], p["secretkey"] = c.S3.AccessKey, c.S3.SecretKey
		}
		return sharedS3Driver, p
	case c.RootDir != "":
		return "filesystem", configuration.Parameters{"rootdirectory": c.RootDir}
	default:
		return "inmemory", configuration.Parameters{}
	}
}

// storageName is how errors name c's storage.
func (c Config) storageName() string {
	switch {
	case c.S3 != nil:
		return c.S3.String()
	case c.RootDir != "":
		return c.RootDir
	default:
		return "in-memory storage"
	}
}

// openDriver makes a driver on c's storage of its own: ferry's side records
// go through it, and GC and the maintenance flag too. An in-memory one is
// not the registry's (each in-memory driver is separate), which suits the
// side records: they only need to live as long as the process.
func (c Config) openDriver(ctx context.Context) (storagedriver.StorageDriver, error) {
	name, params := c.storageDriver()
	d, err := factory.Create(ctx, name, params)
	if err != nil {
		return nil, fmt.Errorf("registry: storage %s: %w", c.storageName(), err)
	}
	return d, nil
}

// CheckStorage proves that c's storage is usable before anything relies on
// it: it writes, reads back and deletes a small object. A wrong bucket,
// endpoint or credentials fail here with the store's own error.
func CheckStorage(ctx context.Context, c Config) error {
	if err := c.validate(); err != nil {
		return err
	}
	d, err := c.openDriver(ctx)
	if err != nil {
		return err
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	p := fmt.Sprintf("/ferry/probe/%x", nonce)
	want := []byte(time.Now().UTC().Format(time.RFC3339Nano))
	if err := d.PutContent(ctx, p, want); err != nil {
		return fmt.Errorf("storage %s: write: %w", c.storageName(), err)
	}
	got, err := d.GetContent(ctx, p)
	if err != nil {
		return fmt.Errorf("storage %s: read back: %w", c.storageName(), err)
	}
	if string(got) != string(want) {
		return fmt.Errorf("storage %s: read back different content", c.storageName())
	}
	if err := d.Delete(ctx, p); err != nil {
		return fmt.Errorf("storage %s: delete: %w", c.storageName(), err)
	}
	return nil
}

// notFound reports whether err is a driver's "no such path".
func notFound(err error) bool {
	var pnf storagedriver.PathNotFoundError
	return errors.As(err, &pnf)
}

// sharedS3Driver is the name distribution finds S3 storage under in a
// ferry registry: its own s3-aws driver, made once per configuration and
// process. Each new s3-aws driver starts an AWS SDK session, and a session
// made while AWS_CA_BUNDLE is set replaces http.DefaultClient's transport,
// which the SDK's requests in flight on other sessions read: a data race
// with every App a maintenance switch builds, and with GarbageCollect. One
// driver per configuration makes the session once, before any request.
const sharedS3Driver = "ferry-s3"

func init() {
	factory.Register(sharedS3Driver, &s3Drivers{m: map[string]storagedriver.StorageDriver{}})
}

type s3Drivers struct {
	mu sync.Mutex
	m  map[string]storagedriver.StorageDriver
}

func (f *s3Drivers) Create(ctx context.Context, params map[string]any) (storagedriver.StorageDriver, error) {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var id strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&id, "%s=%v\n", k, params[k])
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.m[id.String()]; ok {
		return d, nil
	}
	d, err := factory.Create(ctx, "s3aws", params)
	if err != nil {
		return nil, err
	}
	f.m[id.String()] = d
	return d, nil
}
