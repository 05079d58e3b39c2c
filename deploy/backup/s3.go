package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/aws/aws-sdk-go/aws"
	"github.com/aws/aws-sdk-go/aws/awserr"
	"github.com/aws/aws-sdk-go/aws/credentials"
	"github.com/aws/aws-sdk-go/aws/session"
	"github.com/aws/aws-sdk-go/service/s3"
	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/registry"
)

// MinPartSize is the part size of a backup's multipart upload (64 MiB),
// larger for a backup of more than 9,000 parts (S3 takes 10,000).
const MinPartSize = 64 << 20

// S3Object is a backup written to the object st.Prefix names in st.Bucket,
// as one multipart upload of fixed-size parts: nothing appears under the
// key until the upload is completed. What a rerun needs (the upload's id,
// the backup's head) is kept in the object KEY.resume.json until then; a
// rerun lists the parts uploaded and goes on after the last of them.
func S3Object(st *registry.S3) (Destination, error) {
	if st.Prefix == "" {
		return nil, fmt.Errorf("s3://%s: name the object: s3://%s/PATH/NAME.tar", st.Bucket, st.Bucket)
	}
	sess, err := s3Session(st)
	if err != nil {
		return nil, err
	}
	return &s3Dest{st: st, c: s3.New(sess)}, nil
}

func s3Session(st *registry.S3) (*session.Session, error) {
	cfg := aws.NewConfig().WithRegion(registry.DefaultS3Region).WithS3ForcePathStyle(st.PathStyle)
	if st.Region != "" {
		cfg = cfg.WithRegion(st.Region)
	}
	if st.Endpoint != "" {
		cfg = cfg.WithEndpoint(st.Endpoint)
	}
	if st.AccessKey != "" {
		cfg = cfg.WithCredentials(credentials.NewStaticCredentials(st.AccessKey, st.SecretKey, ""))
	}
	return session.NewSession(cfg)
}

type s3Dest struct {
	st *registry.S3
	c  *s3.S3
	// set by resume: the upload to go on with and its parts.
	uploadID string
	partSize int64
	parts    []*s3.CompletedPart
}

func (d *s3Dest) String() string   { return "s3://" + d.st.Bucket + "/" + d.st.Prefix }
func (d *s3Dest) stateKey() string { return d.st.Prefix + ".resume.json" }

func (d *s3Dest) resume(ctx context.Context, rootOf func(*head) (digest.Digest, error)) (*head, int64, error) {
	out, err := d.c.GetObjectWithContext(ctx, &s3.GetObjectInput{Bucket: &d.st.Bucket, Key: aws.String(d.stateKey())})
	if isS3NotFound(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s: read %s: %w", d, d.stateKey(), err)
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, maxStateSize+1))
	out.Body.Close()
	if err != nil {
		return nil, 0, err
	}
	var st resumeState
	if len(data) > maxStateSize || json.Unmarshal(data, &st) != nil || st.UploadID == "" || st.PartSize < 5<<20 {
		d.drop(ctx, "")
		return nil, 0, nil
	}
	if root, err := rootOf(&st.Head); err != nil || root != st.Root {
		d.drop(ctx, st.UploadID) // ErrChanged: start over
		return nil, 0, nil
	}
	var parts []*s3.Part
	err = d.c.ListPartsPagesWithContext(ctx, &s3.ListPartsInput{Bucket: &d.st.Bucket, Key: &d.st.Prefix, UploadId: &st.UploadID},
		func(p *s3.ListPartsOutput, _ bool) bool { parts = append(parts, p.Parts...); return true })
	if err != nil {
		d.drop(ctx, st.UploadID)
		return nil, 0, nil
	}
	sort.Slice(parts, func(i, j int) bool { return aws.Int64Value(parts[i].PartNumber) < aws.Int64Value(parts[j].PartNumber) })
	d.uploadID, d.partSize = st.UploadID, st.PartSize
	for i, p := range parts {
		if aws.Int64Value(p.PartNumber) != int64(i+1) || aws.Int64Value(p.Size) != st.PartSize {
			break
		}
		d.parts = append(d.parts, &s3.CompletedPart{PartNumber: p.PartNumber, ETag: p.ETag})
	}
	return &st.Head, int64(len(d.parts)) * st.PartSize, nil
}

// drop aborts an upload and forgets its state.
func (d *s3Dest) drop(ctx context.Context, uploadID string) {
	if uploadID != "" {
		_, _ = d.c.AbortMultipartUploadWithContext(ctx, &s3.AbortMultipartUploadInput{Bucket: &d.st.Bucket, Key: &d.st.Prefix, UploadId: &uploadID})
	}
	_, _ = d.c.DeleteObjectWithContext(ctx, &s3.DeleteObjectInput{Bucket: &d.st.Bucket, Key: aws.String(d.stateKey())})
}

func (d *s3Dest) write(ctx context.Context, h *head, a *archive, start int64, body func(io.Writer, int64) error) error {
	if d.uploadID == "" {
		d.partSize = max(MinPartSize, (a.size/9000+1<<20)>>20<<20)
		up, err := d.c.CreateMultipartUploadWithContext(ctx, &s3.CreateMultipartUploadInput{Bucket: &d.st.Bucket, Key: &d.st.Prefix, ContentType: aws.String("application/x-tar")})
		if err != nil {
			return err
		}
		d.uploadID, start, d.parts = aws.StringValue(up.UploadId), 0, nil
	}
	state, err := json.Marshal(resumeState{Root: a.root.Digest, Head: *h, UploadID: d.uploadID, PartSize: d.partSize})
	if err != nil {
		return err
	}
	if _, err := d.c.PutObjectWithContext(ctx, &s3.PutObjectInput{Bucket: &d.st.Bucket, Key: aws.String(d.stateKey()), Body: bytes.NewReader(state)}); err != nil {
		return err
	}
	pw := &partWriter{ctx: ctx, d: d, buf: make([]byte, 0, d.partSize)}
	if err := body(pw, start); err != nil {
		return err
	}
	if err := pw.flush(); err != nil {
		return err
	}
	_, err = d.c.CompleteMultipartUploadWithContext(ctx, &s3.CompleteMultipartUploadInput{Bucket: &d.st.Bucket, Key: &d.st.Prefix, UploadId: &d.uploadID,
		MultipartUpload: &s3.CompletedMultipartUpload{Parts: d.parts}})
	if err != nil {
		return err
	}
	_, _ = d.c.DeleteObjectWithContext(ctx, &s3.DeleteObjectInput{Bucket: &d.st.Bucket, Key: aws.String(d.stateKey())})
	return nil
}

// partWriter uploads what it is given in parts of the upload's part size.
type partWriter struct {
	ctx context.Context
	d   *s3Dest
	buf []byte
}

func (w *partWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		room := int(w.d.partSize) - len(w.buf)
		take := min(room, len(p))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == int(w.d.partSize) {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *partWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	num := int64(len(w.d.parts) + 1)
	out, err := w.d.c.UploadPartWithContext(w.ctx, &s3.UploadPartInput{Bucket: &w.d.st.Bucket, Key: &w.d.st.Prefix, UploadId: &w.d.uploadID,
		PartNumber: &num, Body: bytes.NewReader(w.buf)})
	if err != nil {
		return fmt.Errorf("upload part %d: %w", num, err)
	}
	w.d.parts = append(w.d.parts, &s3.CompletedPart{PartNumber: &num, ETag: out.ETag})
	w.buf = w.buf[:0]
	return nil
}

// OpenS3 opens the object st names for reading.
func OpenS3(ctx context.Context, st *registry.S3) (io.ReadCloser, error) {
	sess, err := s3Session(st)
	if err != nil {
		return nil, err
	}
	out, err := s3.New(sess).GetObjectWithContext(ctx, &s3.GetObjectInput{Bucket: &st.Bucket, Key: &st.Prefix})
	if err != nil {
		if isS3NotFound(err) {
			return nil, fmt.Errorf("s3://%s/%s: no such backup", st.Bucket, st.Prefix)
		}
		return nil, fmt.Errorf("s3://%s/%s: %w", st.Bucket, st.Prefix, err)
	}
	return out.Body, nil
}

func isS3NotFound(err error) bool {
	var ae awserr.Error
	return errors.As(err, &ae) && (ae.Code() == s3.ErrCodeNoSuchKey || ae.Code() == "NotFound" || ae.Code() == s3.ErrCodeNoSuchUpload)
}
