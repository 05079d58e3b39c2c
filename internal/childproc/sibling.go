package childproc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
)

// FindSibling returns the regular file named name beside the running executable
// (symbolic links followed, as when bin/ferry is linked into
// /usr/local/bin), else the one exec.LookPath finds on PATH. When it is in
// neither, path is empty and err nil; exe is the running executable's path
// (symbolic links followed), for messages.
func FindSibling(name string) (path, exe string, err error) {
	exe, err = os.Executable()
	if err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		p := filepath.Join(filepath.Dir(exe), name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, exe, nil
		}
	}
	p, err := exec.LookPath(name)
	switch {
	case err == nil:
		return p, exe, nil
	case errors.Is(err, exec.ErrNotFound):
		return "", exe, nil
	}
	return "", exe, err
}
