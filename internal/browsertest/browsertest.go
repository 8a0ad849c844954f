// Package browsertest drives a real headless Chromium (Debian's chromium
// package) through the DevTools protocol with chromedp, for tests of the web
// pages Chronos serves. A Browser opens pages, waits for elements and text,
// clicks, fills fields, reads text and takes screenshots; every call fails
// the test with the page's text when it does not succeed in time.
//
// The browser runs with the flags a closed machine needs (no sandbox, no
// GPU, no QUIC, no first-run, background networking, component updates or
// sync) in a fresh profile directory, and every request a page makes is
// watched: a test fails if any went to a host other than the loopback one.
//
// Chromium is looked up at $CHRONOS_TEST_CHROMIUM, else /usr/bin/chromium.
// When it is missing, New fails the test with a message that says how to
// install it (make deps-chromium); it never skips.
package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// EnvChromium names the environment variable that points at the browser.
const EnvChromium = "CHRONOS_TEST_CHROMIUM"

// DefaultChromium is where Debian's chromium package installs the browser.
const DefaultChromium = "/usr/bin/chromium"

// DefaultTimeout bounds each step of a Browser.
const DefaultTimeout = 20 * time.Second

// ChromiumPath returns the browser to run, or an error saying how to get it.
func ChromiumPath() (string, error) {
	path, from := DefaultChromium, "the default "+DefaultChromium
	if p := os.Getenv(EnvChromium); p != "" {
		path, from = p, "$"+EnvChromium+" ("+p+")"
	}
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("browsertest: no chromium at %s: install Debian's chromium (`make deps-chromium` as root, or apt-get install chromium) or set %s to a Chromium binary", from, EnvChromium)
	}
	return path, nil
}

// Browser is one headless Chromium with one tab, closed when the test ends.
type Browser struct {
	t       testing.TB
	ctx     context.Context
	timeout time.Duration

	mu  sync.Mutex
	off []string // requests that left the loopback host
}

// New starts Chromium for t. It fails t when the browser is missing or does
// not start. When t ends the browser is closed, and t fails if a page made
// a request off the loopback host (unless TakeOffLoopback took them).
func New(t testing.TB) *Browser {
	t.Helper()
	path, err := ChromiumPath()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var outMu sync.Mutex
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(lockedWriter{&outMu, &out}),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &Browser{t: t, timeout: DefaultTimeout}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(b.watch))
	b.ctx = ctx
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		if off := b.TakeOffLoopback(); len(off) > 0 {
			t.Errorf("browsertest: the page made requests off the loopback host:\n  %s", strings.Join(off, "\n  "))
		}
	})
	// The first call starts the browser, which then lives as long as the
	// context of that call: ctx itself, cancelled if the start hangs.
	hung := time.AfterFunc(60*time.Second, cancel)
	err = chromedp.Do(ctx, chromedp.Navigate("about:blank"))
	hung.Stop()
	if err != nil {
		outMu.Lock()
		defer outMu.Unlock()
		t.Fatalf("browsertest: starting %s: %v\n%s", path, err, out.String())
	}
	return b
}

// lockedWriter serialises writes of the browser's output.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// watch records every request that leaves the loopback host.
func (b *Browser) watch(ev any) {
	e, ok := ev.(*network.EventRequestWillBeSent)
	if !ok || e.Request == nil {
		return
	}
	if !Loopback(e.Request.URL) {
		b.mu.Lock()
		b.off = append(b.off, e.Request.Method+" "+e.Request.URL)
		b.mu.Unlock()
	}
}

// Loopback reports whether a URL a page requested stays on the machine: a
// loopback host, or a scheme that makes no network request (data, blob,
// about).
func Loopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "data", "blob", "about":
		return true
	case "http", "https", "ws", "wss":
	default:
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// TakeOffLoopback returns the requests made off the loopback host so far and
// forgets them (a test that provokes one on purpose takes it).
func (b *Browser) TakeOffLoopback() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	off := b.off
	b.off = nil
	return off
}

// run runs steps within the step timeout, failing the test with what the
// page shows when they do not succeed.
func (b *Browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	for {
		err := chromedp.Do(ctx, steps...)
		if err == nil {
			return
		}
		if !contextReplaced(err) || ctx.Err() != nil {
			b.t.Fatalf("browsertest: %s: %v\n---- the page shows:\n%s", what, err, b.pageText())
		}
		// The page's JavaScript context was replaced under the step (a load
		// that had just finished): the browser tells of the new one in a
		// moment, and the step is safe to repeat in it.
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// contextReplaced reports whether err says the page's execution context
// went away under a call, which a repeat of the call gets past.
func contextReplaced(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") ||
		strings.Contains(msg, "Execution context was destroyed") ||
		strings.Contains(msg, "Inspected target navigated or closed")
}

// pageText is the visible text of the page, for failure messages.
func (b *Browser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "")`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return text
}

// Open loads url in the tab and waits for it to load.
func (b *Browser) Open(url string) {
	b.t.Helper()
	b.run("open "+url, chromedp.Navigate(url))
}

// WaitVisible waits until an element matching the CSS selector is visible.
func (b *Browser) WaitVisible(sel string) {
	b.t.Helper()
	b.run("wait for "+sel+" to be visible", chromedp.WaitVisible(chromedp.CSS(sel)))
}

// WaitGone waits until no element matches the CSS selector.
func (b *Browser) WaitGone(sel string) {
	b.t.Helper()
	b.run("wait for "+sel+" to be gone", chromedp.Poll[chromedp.Void](`!document.querySelector(`+jsString(sel)+`)`))
}

// WaitText waits until an element matching the CSS selector shows text
// containing want.
func (b *Browser) WaitText(sel, want string) {
	b.t.Helper()
	expr := fmt.Sprintf(`Array.from(document.querySelectorAll(%s)).some((el) => el.innerText.includes(%s))`, jsString(sel), jsString(want))
	b.run(fmt.Sprintf("wait for %s to show %q", sel, want), chromedp.Poll[chromedp.Void](expr))
}

// WaitExact waits until the first element matching the CSS selector shows
// exactly want (ignoring surrounding white space).
func (b *Browser) WaitExact(sel, want string) {
	b.t.Helper()
	expr := fmt.Sprintf(`((el) => !!el && el.innerText.trim() === %s)(document.querySelector(%s))`, jsString(want), jsString(sel))
	b.run(fmt.Sprintf("wait for %s to show exactly %q", sel, want), chromedp.Poll[chromedp.Void](expr))
}

// Click clicks the first element matching the CSS selector once it is
// visible.
func (b *Browser) Click(sel string) {
	b.t.Helper()
	b.run("click "+sel, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
}

// Fill types value into the field matching the CSS selector, replacing
// what it held. It focuses the field and types into it, as SendKeys does,
// without SendKeys' read of the node's attributes, which races with the
// attribute change Clear has just caused.
func (b *Browser) Fill(sel, value string) {
	b.t.Helper()
	b.run("fill "+sel, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Clear(chromedp.CSS(sel)),
		chromedp.Focus(chromedp.CSS(sel)), chromedp.KeyEvent(value))
}

// Text returns the visible text of the first element matching the CSS
// selector.
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("browsertest: read %s: %v\n---- the page shows:\n%s", sel, err, b.pageText())
	}
	return text
}

// Eval evaluates a JavaScript expression in the page and decodes its value
// into a T.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("browsertest: evaluate %s: %v", expr, err)
	}
	return v
}

// Viewport sets the width and height of the page's viewport in CSS pixels
// (a width under 600 emulates a phone).
func (b *Browser) Viewport(width, height int) {
	b.t.Helper()
	var opts []chromedp.EmulateViewportOption
	if width < 600 {
		opts = append(opts, chromedp.EmulateMobile)
	}
	b.run(fmt.Sprintf("set the viewport to %dx%d", width, height), chromedp.EmulateViewport(int64(width), int64(height), opts...))
}

// Screenshot sets the viewport to width x height and saves a PNG of the
// whole page (beyond the viewport's height when it is longer) to path.
func (b *Browser) Screenshot(path string, width, height int) {
	b.t.Helper()
	b.Viewport(width, height)
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browsertest: screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.t.Fatalf("browsertest: screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatalf("browsertest: screenshot: %v", err)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	q, err := json.Marshal(s)
	if err != nil {
		panic(errors.New("browsertest: a string that JSON cannot quote")) // never: strings always marshal
	}
	return string(q)
}
