package backup_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/deploy/backup"
	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// BenchmarkBackupRatio (make bench-backup) times a backup of
// FERRY_BENCH_BACKUP_MIB MiB (default 1024) of random layers in a registry
// on filesystem storage, and its restore into another, each against a plain
// copy of the same bytes: cp -r of the registry's storage folder, then sync.
// It reports the seconds and the ratios (backup-ratio, restore-ratio).
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
	_ = exec.Command("sync").Run()
	copyTime := min(plain("copy1"), plain("copy2"))

	file := filepath.Join(dir, "backup.tar")
	b.ResetTimer()
	start := time.Now()
	res, err := backup.Write(ctx, backup.Source{Registry: registryAt(b, src), Name: src}, backup.File(file), backup.Options{})
	if err != nil {
		b.Fatal(err)
	}
	backupTime := time.Since(start)
	_ = exec.Command("sync").Run() // the backup synced its file; the registry's reads left nothing dirty

	dstDir := filepath.Join(dir, "dst")
	dst := registrytest.Host(registrytest.NewServer(b, registry.Config{RootDir: dstDir}))
	start = time.Now()
	if _, err := backup.Restore(ctx, backup.Target{Registry: registryAt(b, dst)}, []string{file}, backup.RestoreOptions{}); err != nil {
		b.Fatal(err)
	}
	pushed := time.Since(start)
	if err := exec.Command("sync").Run(); err != nil {
		b.Fatal(err)
	}
	restoreTime := time.Since(start)
	b.Logf("restore: %.2fs to push, %.2fs to sync", pushed.Seconds(), (restoreTime - pushed).Seconds())
	b.StopTimer()
	b.Logf("%d MiB in %d blobs: plain copy %.2fs, backup %.2fs (%d bytes), restore %.2fs", mib, res.Carried, copyTime.Seconds(), backupTime.Seconds(), res.Size, restoreTime.Seconds())
	b.ReportMetric(float64(mib), "MiB")
	b.ReportMetric(copyTime.Seconds(), "copy-s")
	b.ReportMetric(backupTime.Seconds(), "backup-s")
	b.ReportMetric(restoreTime.Seconds(), "restore-s")
	b.ReportMetric(backupTime.Seconds()/copyTime.Seconds(), "backup-ratio")
	b.ReportMetric(restoreTime.Seconds()/copyTime.Seconds(), "restore-ratio")
}
