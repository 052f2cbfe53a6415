// Package egress is the only network access plugins have: HTTP requests and WebSocket
// connections, made by the host on a plugin's behalf, to hosts its policy allows, with timeouts
// and size caps.
package egress

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Policy decides which hosts a plugin may reach. Deny by default: a host is allowed only if it
// matches a pattern of the plugin's manifest (and, when the operator narrowed it, of Narrow too),
// or a pattern the operator added explicitly (Extra, e.g. a loopback fake in tests).
//
// A pattern is a host name or IP ("api.telegram.org", "127.0.0.1"), optionally with a port
// ("127.0.0.1:8080"), or a wildcard for subdomains ("*.slack.com", which does not match
// "slack.com" itself). Matching is case-insensitive.
type Policy struct {
	Manifest []string // declared by the plugin
	Narrow   []string // if not empty, the operator allows only these of the manifest's
	Extra    []string // granted by the operator beyond the manifest
}

// Check returns nil if u may be reached, and an error naming the refused host otherwise.
func (p Policy) Check(u *url.URL) error {
	host, port := u.Hostname(), u.Port()
	if port == "" {
		switch u.Scheme {
		case "http", "ws":
			port = "80"
		case "https", "wss":
			port = "443"
		}
	}
	if host == "" {
		return fmt.Errorf("egress: URL %q has no host", u.Redacted())
	}
	if matchAny(p.Extra, host, port) {
		return nil
	}
	if matchAny(p.Manifest, host, port) && (len(p.Narrow) == 0 || matchAny(p.Narrow, host, port)) {
		return nil
	}
	return &DeniedError{Host: net.JoinHostPort(host, port), Declared: p.Manifest}
}

// DeniedError reports egress to a host the policy does not allow.
type DeniedError struct {
	Host     string
	Declared []string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("egress to %s is not allowed: the plugin's manifest does not declare it (declared: %s)",
		e.Host, describe(e.Declared))
}

func describe(patterns []string) string {
	if len(patterns) == 0 {
		return "none"
	}
	return strings.Join(patterns, ", ")
}

func matchAny(patterns []string, host, port string) bool {
	for _, pat := range patterns {
		if match(pat, host, port) {
			return true
		}
	}
	return false
}

func match(pattern, host, port string) bool {
	pHost, pPort := pattern, ""
	if h, p, err := net.SplitHostPort(pattern); err == nil {
		pHost, pPort = h, p
	}
	if pPort != "" && pPort != port {
		return false
	}
	pHost = strings.ToLower(strings.Trim(pHost, "[]"))
	host = strings.ToLower(host)
	if suffix, ok := strings.CutPrefix(pHost, "*."); ok {
		return strings.HasSuffix(host, "."+suffix) && len(host) > len(suffix)+1
	}
	return pHost == host
}

// ValidatePattern reports whether s is a well-formed egress pattern.
func ValidatePattern(s string) error {
	h := s
	if host, port, err := net.SplitHostPort(s); err == nil {
		h = host
		if port == "" || strings.Trim(port, "0123456789") != "" {
			return fmt.Errorf("egress pattern %q: bad port", s)
		}
	}
	h = strings.TrimPrefix(h, "*.")
	if h == "" || strings.ContainsAny(h, "/*?@ ") {
		return fmt.Errorf("egress pattern %q: want a host name, an IP or *.domain", s)
	}
	return nil
}
