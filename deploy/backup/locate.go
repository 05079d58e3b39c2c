package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/scratch"
	"github.com/ferrypkg/ferry/registry"
)

// ParseDestination is where a backup is to be written: an s3:// URL (see
// registry.ParseS3URL) or a file, whose folder must exist; checked before
// anything is read.
func ParseDestination(file string) (Destination, error) {
	switch {
	case file == "":
		return nil, errors.New("no backup to write named (a file or s3://BUCKET/KEY)")
	case strings.HasPrefix(file, "s3://"):
		st, err := registry.ParseS3URL(file)
		if err != nil {
			return nil, err
		}
		return S3Object(st)
	}
	if fi, err := os.Stat(file); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", file)
	}
	if fi, err := os.Stat(filepath.Dir(file)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s: its folder %s does not exist", file, filepath.Dir(file))
	}
	return File(file), nil
}

// ReadBase reads the base an incremental backup extends: a backup (a
// file or an s3:// URL; its head and record only) or a receipt of
// `ferry registry have`.
func ReadBase(ctx context.Context, since string) (*Base, error) {
	if strings.HasPrefix(since, "s3://") {
		st, err := registry.ParseS3URL(since)
		if err != nil {
			return nil, err
		}
		info, err := ReadInfoS3(ctx, st)
		if err != nil {
			return nil, err
		}
		return info.Base(), nil
	}
	f, err := openRegularFile(since)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var first [1]byte
	if _, err := io.ReadFull(f, first[:]); err != nil {
		return nil, fmt.Errorf("%s: neither a backup nor a receipt", since)
	}
	if first[0] == '{' {
		if fi, err := f.Stat(); err == nil && fi.Size() > artifact.MaxReceiptSize {
			return nil, fmt.Errorf("%s: receipt is %d bytes, more than %d", since, fi.Size(), artifact.MaxReceiptSize)
		}
		data, err := io.ReadAll(io.LimitReader(io.MultiReader(bytes.NewReader(first[:]), f), artifact.MaxReceiptSize+1))
		if err != nil {
			return nil, err
		}
		rc, err := artifact.ParseReceipt(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", since, err)
		}
		return BaseFromReceipt(rc), nil
	}
	info, err := ReadInfo(io.MultiReader(bytes.NewReader(first[:]), f), since)
	if err != nil {
		return nil, err
	}
	return info.Base(), nil
}

// openRegularFile opens a regular file for reading, refusing anything
// else (a FIFO would block, a folder is no backup). It opens without
// blocking and then looks at what it opened: a FIFO put at path between
// a look and an open cannot make it wait.
func openRegularFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such file", path)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return f, nil
}

// LocalFiles are the backups as files: s3:// ones downloaded into a
// scratch folder (internal/scratch) held until cleanup removes it, so that
// a ferry killed meanwhile leaves nothing the next one does not remove;
// files must be regular.
func LocalFiles(ctx context.Context, args []string) ([]string, func(), error) {
	var dir *scratch.Dir
	cleanup := func() { _ = dir.Remove() }
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "s3://") {
			f, err := openRegularFile(a)
			if err != nil {
				return nil, cleanup, err
			}
			f.Close()
			out = append(out, a)
			continue
		}
		st, err := registry.ParseS3URL(a)
		if err != nil {
			return nil, cleanup, err
		}
		if dir == nil {
			if dir, err = scratch.MkdirTemp("", "ferry-restore-"); err != nil {
				return nil, cleanup, err
			}
		}
		body, err := OpenS3(ctx, st)
		if err != nil {
			return nil, cleanup, err
		}
		f, err := os.CreateTemp(dir.Path, "backup-*.tar")
		if err != nil {
			body.Close()
			return nil, cleanup, err
		}
		_, err = io.Copy(f, body)
		body.Close()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, cleanup, fmt.Errorf("download %s: %w", a, err)
		}
		out = append(out, f.Name())
	}
	return out, cleanup, nil
}
