package scratch

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain: as a helper process, make a folder and a file in
// $FERRY_SCRATCH_DIR, print their paths and wait to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("FERRY_SCRATCH_DIR"); dir != "" {
		d, err := MkdirTemp(dir, "ferry-test-")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		os.WriteFile(filepath.Join(d.Path, "big"), make([]byte, 1<<20), 0o644)
		f, err := CreateTemp(dir, "ferry-spool-*")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(d.Path, f.Name())
		// Not select{}: alone, it is a deadlock the runtime ends at once,
		// freeing the locks before the test looks. A sleep is not.
		time.Sleep(10 * time.Minute)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestSweepKilled(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "ferry-notes.txt") // not ours: no Suffix
	os.WriteFile(other, []byte("x"), 0o644)

	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), "FERRY_SCRATCH_DIR="+dir)
	out, _ := helper.StdoutPipe()
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	paths := strings.Fields(line)
	if len(paths) != 2 {
		t.Fatalf("helper said %q", line)
	}

	// While the helper lives, a sweep leaves its folder and file alone.
	mine, err := MkdirTemp(dir, "ferry-mine-")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a live process's %s was removed: %v", p, err)
		}
	}

	helper.Process.Kill()
	helper.Wait()
	f, err := CreateTemp(dir, "ferry-next-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s of a killed process is left: %v", p, err)
		}
	}
	if _, err := os.Stat(mine.Path); err != nil {
		t.Errorf("this process's folder was removed: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another program's file was removed: %v", err)
	}
	if err := mine.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine.Path); !os.IsNotExist(err) {
		t.Errorf("Remove left %s", mine.Path)
	}
}
