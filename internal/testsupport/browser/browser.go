// Package browser starts a headless Chromium (Debian's, from `make deps`)
// for tests that drive web pages with chromedp.
package browser

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// New starts headless Chromium and returns a tab's context; it is closed
// when the test ends. As root Chromium needs --no-sandbox; nothing runs in
// the background, so no connection leaves loopback. Console errors and
// uncaught exceptions of the page (a script the CSP blocked, say) are
// collected in the returned Log; failed loads are not.
func New(t testing.TB) (context.Context, *Log) {
	t.Helper()
	exe := peertool.Require(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(cancelB)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	log := &Log{}
	go func() {
		for msg, err := range chromedp.Console(bctx) {
			if err != nil {
				return
			}
			// A response that is not 2xx is logged too: the tests look
			// at what the page shows of it instead.
			if msg.Type == "error" && strings.HasPrefix(msg.Text, "Failed to load resource") {
				continue
			}
			if msg.Type == "error" || msg.Type == chromedp.ConsoleException {
				log.add(string(msg.Type) + ": " + msg.Text)
			}
		}
	}()
	return bctx, log
}

// Log collects a page's console errors and exceptions.
type Log struct {
	mu   sync.Mutex
	msgs []string
}

func (l *Log) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, s)
}

// Errors are the errors logged so far.
func (l *Log) Errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}
