package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// client sends spec requests, answering basic and bearer challenges with the
// configured credentials.
type client struct {
	base       *url.URL
	hc         *http.Client
	user, pass string
	// maxBody bounds a response body read: a registry under test answering
	// without end costs at most this much memory.
	maxBody int64

	mu     sync.Mutex
	basic  bool
	tokens map[string]string // scope → bearer token
}

// response is an HTTP response with its body read.
type response struct {
	Status int
	Header http.Header
	Body   []byte
	URL    *url.URL // the request URL, for resolving Location
}

// request describes one call; Path is relative to the base URL unless it is
// absolute (an upload Location).
type request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

func (c *client) do(ctx context.Context, r request) (*response, error) {
	u, err := c.resolve(r.Path)
	if err != nil {
		return nil, err
	}
	scope := scopeFor(r.Method, u)
	resp, err := c.send(ctx, r, u, scope)
	if err != nil {
		return nil, err
	}
	if resp.Status == http.StatusUnauthorized {
		if err := c.authorize(ctx, resp.Header.Get("WWW-Authenticate"), scope); err == nil {
			return c.send(ctx, r, u, scope)
		} else if err != errNoCredentials {
			return nil, err
		}
	}
	return resp, nil
}

var errNoCredentials = fmt.Errorf("no credentials")

func (c *client) resolve(p string) (*url.URL, error) {
	ref, err := url.Parse(p)
	if err != nil {
		return nil, fmt.Errorf("bad URL %q: %w", p, err)
	}
	if ref.IsAbs() || strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "/v2/") {
		return c.base.ResolveReference(ref), nil
	}
	u := *c.base
	u.Path = c.base.Path + ref.Path
	u.RawQuery = ref.RawQuery
	return &u, nil
}

func (c *client) send(ctx context.Context, r request, u *url.URL, scope string) (*response, error) {
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(r.Body))
	if err != nil {
		return nil, err
	}
	if r.Body == nil {
		req.Body, req.GetBody = http.NoBody, nil
		req.ContentLength = 0
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	c.mu.Lock()
	if tok, ok := c.tokens[scope]; ok {
		req.Header.Set("Authorization", "Bearer "+tok)
	} else if c.basic {
		req.SetBasicAuth(c.user, c.pass)
	}
	c.mu.Unlock()
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", r.Method, u.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading body: %w", r.Method, u.Path, err)
	}
	if int64(len(body)) > c.maxBody {
		return nil, fmt.Errorf("%s %s: the body is larger than %d bytes", r.Method, u.Path, c.maxBody)
	}
	return &response{Status: resp.StatusCode, Header: resp.Header, Body: body, URL: u}, nil
}

// authorize answers a WWW-Authenticate challenge for scope.
func (c *client) authorize(ctx context.Context, challenge, scope string) error {
	scheme, params := parseChallenge(challenge)
	switch scheme {
	case "basic":
		if c.user == "" && c.pass == "" {
			return errNoCredentials
		}
		c.mu.Lock()
		c.basic = true
		c.mu.Unlock()
		return nil
	case "bearer":
		tokenScope := scope
		if tokenScope == "" {
			tokenScope = params["scope"]
		}
		realm, err := url.Parse(params["realm"])
		if err != nil || realm.Host == "" {
			return fmt.Errorf("bearer challenge with bad realm %q", params["realm"])
		}
		q := realm.Query()
		if s := params["service"]; s != "" {
			q.Set("service", s)
		}
		for _, s := range strings.Fields(tokenScope) {
			q.Add("scope", s)
		}
		realm.RawQuery = q.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
		if err != nil {
			return err
		}
		if c.user != "" || c.pass != "" {
			req.SetBasicAuth(c.user, c.pass)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return fmt.Errorf("token from %s: %w", realm.Host, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("token from %s: %s", realm.Host, resp.Status)
		}
		var tok struct {
			Token       string `json:"token"`
			AccessToken string `json:"access_token"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tok); err != nil {
			return fmt.Errorf("token from %s: %w", realm.Host, err)
		}
		if tok.Token == "" {
			tok.Token = tok.AccessToken
		}
		c.mu.Lock()
		c.tokens[scope] = tok.Token
		c.mu.Unlock()
		return nil
	}
	return errNoCredentials
}

// parseChallenge parses `Scheme k="v", k2="v2"`.
func parseChallenge(h string) (string, map[string]string) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(h), " ")
	params := map[string]string{}
	for rest != "" {
		rest = strings.TrimLeft(rest, " ,")
		k, after, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(after, `"`) {
			end := strings.Index(after[1:], `"`)
			if end < 0 {
				v, rest = after[1:], ""
			} else {
				v, rest = after[1:end+1], after[end+2:]
			}
		} else {
			v, rest, _ = strings.Cut(after, ",")
		}
		params[strings.ToLower(strings.TrimSpace(k))] = v
	}
	return strings.ToLower(scheme), params
}

// scopeFor derives the bearer scope(s) a request needs, space-separated.
func scopeFor(method string, u *url.URL) string {
	rest, ok := strings.CutPrefix(u.Path, "/v2/")
	if !ok {
		return ""
	}
	if rest == "_catalog" {
		return "registry:catalog:*"
	}
	name := ""
	for _, sep := range []string{"/blobs/", "/manifests/", "/tags/", "/referrers/"} {
		if i := strings.LastIndex(rest, sep); i > 0 {
			name = rest[:i]
			break
		}
	}
	if name == "" {
		return ""
	}
	action := "pull"
	switch method {
	case http.MethodGet, http.MethodHead:
	case http.MethodDelete:
		action = "delete"
	default:
		action = "pull,push"
	}
	scope := "repository:" + name + ":" + action
	if from := u.Query().Get("from"); from != "" {
		scope += " repository:" + from + ":pull"
	}
	return scope
}

// location resolves a response's Location header against its request URL.
func (r *response) location() (string, error) {
	loc := r.Header.Get("Location")
	if loc == "" {
		return "", fmt.Errorf("%d response has no Location header", r.Status)
	}
	u, err := r.URL.Parse(loc)
	if err != nil {
		return "", fmt.Errorf("bad Location %q: %w", loc, err)
	}
	return u.String(), nil
}

// errorCodes returns the OCI error codes of a JSON error body, or nil when
// the body is not JSON.
func (r *response) errorCodes() ([]string, error) {
	if len(bytes.TrimSpace(r.Body)) == 0 || !json.Valid(r.Body) {
		return nil, nil
	}
	var body struct {
		Errors []struct {
			Code string `json:"code"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || len(body.Errors) == 0 {
		return nil, fmt.Errorf("JSON error body is not in the spec's format: %.200s", r.Body)
	}
	var codes []string
	for _, e := range body.Errors {
		codes = append(codes, e.Code)
	}
	return codes, nil
}
