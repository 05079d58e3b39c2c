package wire

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// CAHash is the hex SHA-256 of a CA certificate's DER: what a token pins.
func CAHash(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// PinnedTLS trusts only the CA certificate whose hash is pin: the server's
// chain must hold it and its leaf must chain to it. The host name is not
// checked against the leaf: the pin, not a public name, is the trust (a
// member may reach the centre through an address of its network's).
// seen, if set, receives the pinned CA certificate as PEM.
func PinnedTLS(pin string, seen func(caPEM []byte)) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // VerifyConnection does it, against the pin
		VerifyConnection: func(cs tls.ConnectionState) error {
			var ca *x509.Certificate
			for _, c := range cs.PeerCertificates {
				if CAHash(c.Raw) == pin {
					ca = c
				}
			}
			if ca == nil || len(cs.PeerCertificates) == 0 {
				return errors.New("the centre's certificate is not from the CA the token pins")
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca)
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
				return fmt.Errorf("the centre's certificate does not chain to the pinned CA: %w", err)
			}
			if seen != nil {
				seen(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}))
			}
			return nil
		},
	}
}

// CAPin reads a CA certificate (PEM) and returns its pin.
func CAPin(caPEM []byte) (string, error) {
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("the centre's CA is not a PEM certificate")
	}
	return CAHash(block.Bytes), nil
}

// Client speaks to the centre.
type Client struct {
	// URL is the centre's base URL (https://host:port).
	URL string
	// Pin is the CA's hash (from the token, or from the CA kept since).
	Pin string
	// Credential is the member's, once it joined.
	Credential string
	// HTTP is the client; one with PinnedTLS if nil.
	HTTP *http.Client
	// SeenCA, if set, receives the pinned CA (PEM) on each connection.
	SeenCA func([]byte)
}

// ErrRefused is a refusal by the centre: the error names its status and
// its sentence.
var ErrRefused = errors.New("the centre refused")

// RefusedError is a centre's refusal.
type RefusedError struct {
	Status  int
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the centre refused (%d): %s", e.Status, e.Message)
}

func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// http is the client's HTTP client: one that follows no redirect. The
// pin holds only for https, and a redirect would carry the request's
// body (a join's token) wherever the centre, or whoever answers for it,
// says.
func (c *Client) http() *http.Client {
	if c.HTTP == nil {
		tr := &http.Transport{TLSClientConfig: PinnedTLS(c.Pin, c.SeenCA), ForceAttemptHTTP2: true,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 60 * time.Second}
		c.HTTP = &http.Client{Transport: tr}
	}
	if c.HTTP.CheckRedirect == nil {
		hc := *c.HTTP
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		c.HTTP = &hc
	}
	return c.HTTP
}

// CheckURL refuses a centre URL that is not https://host[:port].
func CheckURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("the centre's URL %q is not https://host[:port]", truncate(s))
	}
	return nil
}

func (c *Client) do(ctx context.Context, path string, in any, auth bool) (*http.Response, error) {
	if err := CheckURL(c.URL); err != nil {
		return nil, err
	}
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.Credential)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		// Not net/http's `Post "URL/fleet/v1/…":`: the sentence names the
		// centre once.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("reach the centre at %s: %w", c.URL, err)
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		resp.Body.Close()
		return nil, &RefusedError{Status: resp.StatusCode, Message: "it answers with a redirect, which the member does not follow"}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var p Problem
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if json.Unmarshal(data, &p) != nil || p.Error == "" {
			p.Error = strings.TrimSpace(string(data))
		}
		return nil, &RefusedError{Status: resp.StatusCode, Message: clipRefusal(oneLine(p.Error))}
	}
	return resp, nil
}

// MaxRefusal bounds the sentence of a refusal the client keeps: the
// centre's refusals name members, repositories and digests, longer than
// truncate's 64 characters for what a caller sent.
const MaxRefusal = 1024

func clipRefusal(s string) string {
	if len(s) <= MaxRefusal {
		return s
	}
	s = s[:MaxRefusal]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func decode(resp *http.Response, limit int64, out any) error {
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("read the centre's answer: %w", err)
	}
	if int64(len(data)) > limit {
		return fmt.Errorf("the centre's answer is more than %d bytes", limit)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the centre's answer: %w", err)
	}
	return nil
}

// Join trades a token for a credential.
func (c *Client) Join(ctx context.Context, req JoinRequest) (*JoinResponse, error) {
	resp, err := c.do(ctx, PathJoin, req, false)
	if err != nil {
		return nil, err
	}
	var out JoinResponse
	if err := decode(resp, MaxJoinRequest, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Sync reports and returns the member's desired state.
func (c *Client) Sync(ctx context.Context, r *Report) (*Desired, error) {
	resp, err := c.do(ctx, PathSync, r, true)
	if err != nil {
		return nil, err
	}
	var out Desired
	if err := decode(resp, MaxDesired, &out); err != nil {
		return nil, err
	}
	if len(out.Packages) > MaxPackages {
		return nil, fmt.Errorf("the centre's answer lists %d packages, more than %d", len(out.Packages), MaxPackages)
	}
	return &out, nil
}

// Bundle writes the delta the centre makes for req to w.
func (c *Client) Bundle(ctx context.Context, req BundleRequest, w io.Writer) (int64, error) {
	resp, err := c.do(ctx, PathBundle, req, true)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("read the bundle from the centre: %w", err)
	}
	return n, nil
}
