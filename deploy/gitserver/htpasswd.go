package gitserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/ferrypkg/ferry/internal/confine"
)

// DefaultAuthCacheTTL is how long HtpasswdFile remembers credentials it
// accepted: bcrypt is made to be slow (~50 ms a check), and git clients
// send credentials with every request of a fetch.
const DefaultAuthCacheTTL = 5 * time.Minute

// maxAuthCache bounds the remembered credentials.
const maxAuthCache = 1024

// HtpasswdFile returns an Authenticator that checks Basic credentials
// against the htpasswd file at path (bcrypt entries only, as the
// in-cluster registry's account Secret holds). The file is read again
// whenever it changes (a Secret mounted as a volume is updated in place),
// which also forgets every remembered credential; accepted credentials are
// remembered for ttl (DefaultAuthCacheTTL if ≤ 0). A file that cannot be
// read again, or no longer parses (caught half-written), leaves the
// entries last read in force, and is tried again at the next request; the
// Authenticator fails (an error that is not ErrUnauthorized: the server
// answers 503) only until the file was read once.
func HtpasswdFile(path string, ttl time.Duration) Authenticator {
	if ttl <= 0 {
		ttl = DefaultAuthCacheTTL
	}
	h := &htpasswd{path: path, ttl: ttl}
	return h.check
}

type htpasswd struct {
	path string
	ttl  time.Duration

	mu      sync.Mutex
	stamp   string // size and modification time of the file read
	hashes  map[string][]byte
	granted map[[sha256.Size]byte]time.Time // sha256(user, password) → expiry
}

// dummyHash is compared against for unknown users, so that they take as
// long to refuse as a wrong password. Made on first use: not at every
// start of the binary.
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("ferry"), bcrypt.DefaultCost)
	return h
})

func (h *htpasswd) check(_ context.Context, user, pass string) error {
	hashes, err := h.load()
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(user + "\x00" + pass))
	now := time.Now()
	h.mu.Lock()
	exp, ok := h.granted[sum]
	h.mu.Unlock()
	if ok && now.Before(exp) {
		return nil
	}
	hash, known := hashes[user]
	if !known {
		hash = dummyHash()
	}
	if err := bcrypt.CompareHashAndPassword(hash, []byte(pass)); err != nil || !known {
		return fmt.Errorf("user %q: %w", user, ErrUnauthorized)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.granted) >= maxAuthCache {
		for k, e := range h.granted {
			if !now.Before(e) {
				delete(h.granted, k)
			}
		}
		if len(h.granted) >= maxAuthCache {
			clear(h.granted)
		}
	}
	h.granted[sum] = now.Add(h.ttl)
	return nil
}

// MaxHtpasswdSize bounds the htpasswd file (4 MiB).
const MaxHtpasswdSize = 4 << 20

// load returns the file's entries, read again if its size or modification
// time changed; if it cannot be, the entries last read.
func (h *htpasswd) load() (map[string][]byte, error) {
	fi, err := os.Stat(h.path)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil && h.hashes != nil && stampOf(fi) == h.stamp {
		return h.hashes, nil
	}
	if err == nil {
		hashes, stamp, rerr := readHtpasswd(h.path)
		if rerr == nil {
			h.stamp, h.hashes, h.granted = stamp, hashes, map[[sha256.Size]byte]time.Time{}
			return hashes, nil
		}
		err = rerr
	} else {
		err = fmt.Errorf("htpasswd: %w", err)
	}
	if h.hashes != nil {
		return h.hashes, nil
	}
	return nil, err
}

// CheckHtpasswd reads and parses the htpasswd file at path as
// HtpasswdFile will, so that a server refuses one that cannot serve before
// it starts.
func CheckHtpasswd(path string) error {
	_, _, err := readHtpasswd(path)
	return err
}

func stampOf(fi os.FileInfo) string { return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano()) }

// readHtpasswd stamps the file (size and modification time) and parses
// it.
func readHtpasswd(path string) (map[string][]byte, string, error) {
	// Not blocking on a FIFO put in its place.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", fmt.Errorf("htpasswd: %w", confine.Wrap(path, err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", fmt.Errorf("htpasswd: %w", confine.Wrap(path, err))
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("htpasswd %s: not a regular file", path)
	}
	if fi.Size() > MaxHtpasswdSize {
		return nil, "", fmt.Errorf("htpasswd %s: larger than %d bytes", path, MaxHtpasswdSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxHtpasswdSize+1))
	if err != nil {
		return nil, "", fmt.Errorf("htpasswd: %w", err)
	}
	hashes, err := parseHtpasswd(b)
	if err != nil {
		return nil, "", fmt.Errorf("htpasswd %s: %w", path, err)
	}
	return hashes, stampOf(fi), nil
}

// parseHtpasswd reads user:bcrypt-hash lines; blank lines and # comments
// are skipped, other hash schemes refused.
func parseHtpasswd(b []byte) (map[string][]byte, error) {
	hashes := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("line %d: want user:hash", n)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("line %d (user %.64q): not a bcrypt hash", n, user)
		}
		hashes[user] = []byte(hash)
	}
	return hashes, sc.Err()
}
