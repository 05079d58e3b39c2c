package backup_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferrypkg/ferry/deploy/backup"
	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// BenchmarkBackupRatio (make bench-backup) times a backup of
// FERRY_BENCH_BACKUP_MIB MiB (default 1024) of random layers in a registry
// on filesystem storage, and its restore into another, each against two
// copies of the same bytes: a plain copy (cp -r of the registry's storage
// folder, then sync) and a checked copy (each blob's file copied and its
// SHA-256 checked against its name, two at a time, then sync), the least
// any backup that checks what it carries can do. It reports the seconds
// and the ratios to each (backup-ratio and restore-ratio are to the
// checked copy, plain-backup-ratio and plain-restore-ratio to cp); and,
// where oras is installed, the ratios to the peer on the same content in
// the same run: `oras backup` of every repository into a tar each, then
// `oras restore` of each into another registry (oras-backup-ratio,
// oras-restore-ratio: ferry's time over oras's).
func BenchmarkBackupRatio(b *testing.B) {
	mib := 1024
	if v, err := strconv.Atoi(os.Getenv("FERRY_BENCH_BACKUP_MIB")); err == nil && v > 0 {
		mib = v
	}
	benchenv.Quiet(b, 2)
	ctx := context.Background()
	dir := b.TempDir()
	srcDir := filepath.Join(dir, "src")
	src := registrytest.Host(registrytest.NewServer(b, registry.Config{RootDir: srcDir}))
	const layer = 64 << 20
	n := max(1, mib<<20/layer)
	for i := range n {
		pushImage(b, src, fmt.Sprintf("bench/app%d", i/4), strconv.Itoa(i), randomBlob(b, layer))
	}
	plain := func(name string) time.Duration {
		to := filepath.Join(dir, name)
		start := time.Now()
		if out, err := exec.Command("cp", "-r", srcDir, to).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v: %s", err, out)
		}
		if out, err := exec.Command("sync").CombinedOutput(); err != nil {
			b.Fatalf("sync: %v: %s", err, out)
		}
		d := time.Since(start)
		_ = os.RemoveAll(to)
		return d
	}
	checked := func(name string) time.Duration {
		to := filepath.Join(dir, name)
		start := time.Now()
		if err := checkedCopy(filepath.Join(srcDir, "docker/registry/v2/blobs"), to, 2); err != nil {
			b.Fatal(err)
		}
		if out, err := exec.Command("sync").CombinedOutput(); err != nil {
			b.Fatalf("sync: %v: %s", err, out)
		}
		d := time.Since(start)
		_ = os.RemoveAll(to)
		return d
	}
	_ = exec.Command("sync").Run()
	copyTime := min(plain("copy1"), plain("copy2"))
	checkedTime := min(checked("checked1"), checked("checked2"))

	file := filepath.Join(dir, "backup.tar")
	b.ResetTimer()
	// Each is measured as the copies are, best of two: a backup written
	// anew (the first removed), a restore into a new registry.
	var res *backup.Result
	backupTime, restoreTime := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for i := range 2 {
		_ = os.Remove(file)
		_ = exec.Command("sync").Run()
		start := time.Now()
		r, err := backup.Write(ctx, backup.Source{Registry: registryAt(b, src), Name: src}, backup.File(file), backup.Options{})
		if err != nil {
			b.Fatal(err)
		}
		backupTime, res = min(backupTime, time.Since(start)), r // the backup synced its file
		b.Logf("backup %d: %.2fs", i+1, time.Since(start).Seconds())
	}
	for i := range 2 {
		dstDir := filepath.Join(dir, fmt.Sprint("dst", i))
		dst := registrytest.Host(registrytest.NewServer(b, registry.Config{RootDir: dstDir}))
		_ = exec.Command("sync").Run()
		start := time.Now()
		if _, err := backup.Restore(ctx, backup.Target{Registry: registryAt(b, dst)}, []string{file}, backup.RestoreOptions{}); err != nil {
			b.Fatal(err)
		}
		pushed := time.Since(start)
		if err := exec.Command("sync").Run(); err != nil {
			b.Fatal(err)
		}
		restoreTime = min(restoreTime, time.Since(start))
		b.Logf("restore %d: %.2fs to push, %.2fs to sync", i+1, pushed.Seconds(), (time.Since(start) - pushed).Seconds())
	}
	b.StopTimer()
	if oras := peertool.Find("oras"); oras != "" {
		repos := make([]string, 0, (n+3)/4)
		for i := 0; i < n; i += 4 {
			repos = append(repos, fmt.Sprintf("bench/app%d", i/4))
		}
		orasBackup, orasRestore := orasRoundTrip(b, oras, src, repos, dir)
		b.Logf("oras: backup %.2fs, restore %.2fs", orasBackup.Seconds(), orasRestore.Seconds())
		b.ReportMetric(orasBackup.Seconds(), "oras-backup-s")
		b.ReportMetric(orasRestore.Seconds(), "oras-restore-s")
		b.ReportMetric(backupTime.Seconds()/orasBackup.Seconds(), "oras-backup-ratio")
		b.ReportMetric(restoreTime.Seconds()/orasRestore.Seconds(), "oras-restore-ratio")
	} else {
		b.Log("oras not installed (make deps): no peer ratios")
	}
	b.Logf("%d MiB in %d blobs: plain copy %.2fs, checked copy %.2fs, backup %.2fs (%d bytes), restore %.2fs", mib, res.Carried, copyTime.Seconds(), checkedTime.Seconds(), backupTime.Seconds(), res.Size, restoreTime.Seconds())
	b.ReportMetric(float64(mib), "MiB")
	b.ReportMetric(copyTime.Seconds(), "copy-s")
	b.ReportMetric(checkedTime.Seconds(), "checked-s")
	b.ReportMetric(backupTime.Seconds(), "backup-s")
	b.ReportMetric(restoreTime.Seconds(), "restore-s")
	b.ReportMetric(backupTime.Seconds()/checkedTime.Seconds(), "backup-ratio")
	b.ReportMetric(restoreTime.Seconds()/checkedTime.Seconds(), "restore-ratio")
	b.ReportMetric(backupTime.Seconds()/copyTime.Seconds(), "plain-backup-ratio")
	b.ReportMetric(restoreTime.Seconds()/copyTime.Seconds(), "plain-restore-ratio")
}

// orasRoundTrip backs up each repository of src with `oras backup` (a tar
// each, then sync) and restores them into a new registry on filesystem
// storage with `oras restore` (then sync); best of two of each, as ferry's.
func orasRoundTrip(b *testing.B, oras, src string, repos []string, dir string) (backupTime, restoreTime time.Duration) {
	run := func(args ...string) {
		if out, err := exec.Command(oras, args...).CombinedOutput(); err != nil {
			b.Fatalf("oras %v: %v: %s", args, err, out)
		}
	}
	sync := func() {
		if out, err := exec.Command("sync").CombinedOutput(); err != nil {
			b.Fatalf("sync: %v: %s", err, out)
		}
	}
	backupTime, restoreTime = time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for round := range 2 {
		out := filepath.Join(dir, fmt.Sprint("oras", round))
		if err := os.MkdirAll(out, 0o755); err != nil {
			b.Fatal(err)
		}
		sync()
		start := time.Now()
		for i, r := range repos {
			run("backup", "--no-tty", "--plain-http", "--output", filepath.Join(out, fmt.Sprint(i, ".tar")), src+"/"+r)
		}
		sync()
		backupTime = min(backupTime, time.Since(start))
		dst := registrytest.Host(registrytest.NewServer(b, registry.Config{RootDir: filepath.Join(dir, fmt.Sprint("oras-dst", round))}))
		start = time.Now()
		for i, r := range repos {
			run("restore", "--no-tty", "--plain-http", "--input", filepath.Join(out, fmt.Sprint(i, ".tar")), dst+"/"+r)
		}
		sync()
		restoreTime = min(restoreTime, time.Since(start))
		_ = os.RemoveAll(out)
	}
	return backupTime, restoreTime
}

// checkedCopy copies every blob file under blobs (a filesystem registry's
// blobs/sha256/<xx>/<hex>/data) into to, streams at a time, each read once
// and checked against the digest its path names while it is written.
func checkedCopy(blobs, to string, streams int) error {
	files, err := filepath.Glob(filepath.Join(blobs, "sha256", "*", "*", "data"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("blobs under %s: %d, %v", blobs, len(files), err)
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	var g errgroup.Group
	g.SetLimit(streams)
	for _, name := range files {
		g.Go(func() error {
			want := filepath.Base(filepath.Dir(name))
			in, err := os.Open(name)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.Create(filepath.Join(to, want))
			if err != nil {
				return err
			}
			defer out.Close()
			h := sha256.New()
			if _, err := io.CopyBuffer(io.MultiWriter(out, h), in, make([]byte, 1<<20)); err != nil {
				return err
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != want {
				return fmt.Errorf("%s: sha256 %s", name, got)
			}
			return out.Close()
		})
	}
	return g.Wait()
}
