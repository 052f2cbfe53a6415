// Package egress is the only network access plugins have: HTTP requests and WebSocket
// connections, made by the host on a plugin's behalf, to hosts its policy allows, with timeouts
// and size caps.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/hermes-host/hermes-host/abi"
)

// Policy decides which hosts a plugin may reach. Deny by default: a host is allowed only if it
// matches a pattern of the plugin's manifest (and, when the operator narrowed it, of Narrow too),
// or a pattern the operator added explicitly (Extra, e.g. a loopback fake in tests).
//
// A pattern is a host name or IP ("api.telegram.org", "127.0.0.1"), optionally with a port
// ("127.0.0.1:8080"), or a wildcard for subdomains ("*.slack.com", which does not match
// "slack.com" itself; a wildcard over a public suffix such as "*.com" is refused). Matching is
// case-insensitive. A manifest pattern without a port means the scheme's default port (443 for
// https and wss, 80 for http and ws); an operator's pattern without a port means any port.
//
// Whatever the patterns say, an address that is not public (loopback, private, link-local
// including cloud metadata endpoints, unspecified, multicast, shared CGNAT space) is reached only
// if the operator granted it, through Extra or Internal. That is checked on the address actually
// dialed, after name resolution, so a declared name that resolves to 127.0.0.1 is refused too.
type Policy struct {
	Manifest []string // declared by the plugin
	Narrow   []string // if not empty, the operator allows only these of the manifest's
	Extra    []string // granted by the operator beyond the manifest (and internal addresses)
	// Internal grants internal addresses (IPs, CIDR prefixes or host patterns) without granting
	// any host: a declared host may then resolve to them (a self-hosted API on the LAN).
	Internal []string
	// Scopes are the manifest's scoped hosts: reachable only from some exports, methods, paths.
	Scopes []abi.EgressScope
	// Alias maps an address (host:port) to the declared host it stands in for (a self-hosted
	// Bot API server, a loopback fake): a request to the address is checked as one to the host
	// (its scopes and narrowing apply), and the address is granted.
	Alias map[string]string
}

// Use is what a request is for: the export making it and the HTTP method ("" for a WebSocket
// frame). The scope check needs it; an empty Export is an internal use (no scope allows it).
type Use struct {
	Export string
	Method string
}

// Check returns nil if u may be reached for use, and an error naming the refused origin (and,
// for a scoped host, the scopes) otherwise.
func (p Policy) Check(u *url.URL, use Use) error {
	host, port, def := u.Hostname(), portOf(u), defaultPort(u.Scheme)
	if host == "" {
		return fmt.Errorf("egress: URL %s has no host", Origin(u))
	}
	aliased := false
	if h, ok := p.aliasOf(host, port); ok {
		host, port, aliased = h, def, true
	}
	// The operator's extra hosts are reachable from any export, unless the manifest scopes the
	// host: then its scopes apply, and the grant only opens its internal address.
	if !aliased && !p.scoped(host, port, def) && matchAny(p.Extra, host, port, "") {
		return nil
	}
	narrowed := len(p.Narrow) == 0 || matchAny(p.Narrow, host, port, def)
	if !narrowed {
		return &DeniedError{Origin: Origin(u), Declared: p.declared()}
	}
	if !matchAny(p.Manifest, host, port, def) {
		var scopes []abi.EgressScope
		extra := !aliased && matchAny(p.Extra, host, port, "")
		for _, s := range p.Scopes {
			// A scoped host the operator granted with egress_extra (a loopback fake on another
			// port) keeps its scopes on any port.
			if match(s.Host, host, port, def) || (extra && match(s.Host, host, port, "")) {
				scopes = append(scopes, s)
			}
		}
		if len(scopes) == 0 {
			return &DeniedError{Origin: Origin(u), Declared: p.declared()}
		}
		if !anyScopeAllows(scopes, use, u.Path) {
			return &ScopeError{Origin: Origin(u), Use: use, Scopes: scopes}
		}
	}
	if aliased {
		return nil // the stand-in address is the operator's grant
	}
	// A literal internal address is refused here already, with the same reason as at dial time.
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return p.CheckAddr(host, ip)
	}
	return nil
}

// CheckAddr is the dial-time check: ip, the address host resolved to, must be public or granted
// by the operator.
func (p Policy) CheckAddr(host string, ip netip.Addr) error {
	ip = ip.Unmap()
	kind := internalKind(ip)
	if kind == "" || p.grantsInternal(host, ip) {
		return nil
	}
	return &InternalError{Host: host, Addr: ip, Kind: kind}
}

func (p Policy) aliasOf(host, port string) (string, bool) {
	for target, declared := range p.Alias {
		if match(target, host, port, "") {
			return declared, true
		}
	}
	return "", false
}

func (p Policy) scoped(host, port, def string) bool {
	for _, s := range p.Scopes {
		if match(s.Host, host, port, def) || match(s.Host, host, port, "") {
			return true
		}
	}
	return false
}

func (p Policy) declared() []string {
	out := append([]string{}, p.Manifest...)
	for _, s := range p.Scopes {
		out = append(out, s.Host+" (scoped)")
	}
	return out
}

// anyScopeAllows reports whether one of scopes allows use on path.
func anyScopeAllows(scopes []abi.EgressScope, use Use, p string) bool {
	for _, s := range scopes {
		if !slices.Contains(s.Exports, use.Export) {
			continue
		}
		if use.Method != "" && len(s.Methods) > 0 && !slices.Contains(s.Methods, strings.ToUpper(use.Method)) {
			continue
		}
		if use.Method != "" && len(s.Paths) > 0 && !slices.ContainsFunc(s.Paths, func(pat string) bool {
			ok, _ := path.Match(pat, p)
			return ok
		}) {
			continue
		}
		return true
	}
	return false
}

// ScopeError reports egress to a scoped host outside its scopes. It names the scopes, never
// the request's path (tokens live there).
type ScopeError struct {
	Origin string
	Use    Use
	Scopes []abi.EgressScope
}

func (e *ScopeError) Error() string {
	var scopes []string
	for _, s := range e.Scopes {
		d := fmt.Sprintf("%q: %s", s.Label(), strings.Join(s.Exports, ","))
		if len(s.Methods) > 0 {
			d += " " + strings.Join(s.Methods, ",")
		}
		if len(s.Paths) > 0 {
			d += " " + strings.Join(s.Paths, ",")
		}
		scopes = append(scopes, d)
	}
	what := "a WebSocket frame"
	if e.Use.Method != "" {
		what = e.Use.Method
	}
	export := e.Use.Export
	if export == "" {
		export = "(no export)"
	}
	return fmt.Sprintf("egress scope: %s to %s from %s is outside the plugin's egress scopes for that host (%s)",
		what, e.Origin, export, strings.Join(scopes, "; "))
}

func (p Policy) grantsInternal(host string, ip netip.Addr) bool {
	for target := range p.Alias {
		h := target
		if hh, _, err := net.SplitHostPort(target); err == nil {
			h = hh
		}
		if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil && a.Unmap() == ip {
			return true
		}
		if strings.EqualFold(h, host) {
			return true
		}
	}
	for _, list := range [][]string{p.Extra, p.Internal} {
		for _, pat := range list {
			h := pat
			if hh, _, err := net.SplitHostPort(pat); err == nil {
				h = hh
			}
			h = strings.Trim(h, "[]")
			if pfx, err := netip.ParsePrefix(h); err == nil && pfx.Contains(ip) {
				return true
			}
			if a, err := netip.ParseAddr(h); err == nil && a.Unmap() == ip {
				return true
			}
			if matchHost(strings.ToLower(h), strings.ToLower(host)) {
				return true
			}
		}
	}
	return false
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// internalKind names the class of a non-public address, or "" for a public one.
func internalKind(ip netip.Addr) string {
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local (cloud metadata lives there)"
	case ip.IsPrivate(), cgnat.Contains(ip):
		return "private"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.Is4() && ip.As4()[0] == 0:
		return "this-network"
	}
	return ""
}

// DeniedError reports egress to a host the policy does not allow.
type DeniedError struct {
	Origin   string // scheme://host:port, never the path (tokens live there)
	Declared []string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("egress to %s is not allowed: the plugin's manifest does not declare it (declared: %s)",
		e.Origin, describe(e.Declared))
}

// InternalError reports a host that is, or resolved to, an internal address the operator did
// not grant.
type InternalError struct {
	Host string
	Addr netip.Addr
	Kind string
}

func (e *InternalError) Error() string {
	return fmt.Sprintf("egress to %s refused: it is %s, a %s address; internal addresses are reachable only when the operator grants them (egress_internal or egress_extra)",
		e.Host, e.Addr, e.Kind)
}

func describe(patterns []string) string {
	if len(patterns) == 0 {
		return "none"
	}
	return strings.Join(patterns, ", ")
}

// Origin is u's scheme://host[:port], the only part of a URL that errors and logs quote: paths
// and queries carry tokens (Telegram's /bot<token>/).
func Origin(u *url.URL) string {
	if u == nil {
		return "(no URL)"
	}
	return u.Scheme + "://" + u.Host
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	return defaultPort(u.Scheme)
}

func defaultPort(scheme string) string {
	switch scheme {
	case "http", "ws":
		return "80"
	case "https", "wss":
		return "443"
	}
	return ""
}

func matchAny(patterns []string, host, port, portless string) bool {
	for _, pat := range patterns {
		if match(pat, host, port, portless) {
			return true
		}
	}
	return false
}

// match reports whether host:port matches pattern. A pattern without a port matches only the
// port portless (the scheme's default, for a manifest), or any port if portless is empty (the
// operator's patterns).
func match(pattern, host, port, portless string) bool {
	pHost, pPort := pattern, ""
	if h, p, err := net.SplitHostPort(pattern); err == nil {
		pHost, pPort = h, p
	}
	switch {
	case pPort != "" && pPort != port:
		return false
	case pPort == "" && portless != "" && port != portless:
		return false
	}
	return matchHost(strings.ToLower(strings.Trim(pHost, "[]")), strings.ToLower(strings.Trim(host, "[]")))
}

func matchHost(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+suffix) && len(host) > len(suffix)+1
	}
	return pattern == host
}

// PlatformAPIs are chat platforms' API hosts: a plugin that reaches one can post messages, so
// reaching one unscoped (from every export) is flagged at load.
func PlatformAPIs() []string {
	return []string{"api.telegram.org", "slack.com", "api.slack.com", "wss-primary.slack.com",
		"bot.yuanbao.tencent.com", "bot-wss.yuanbao.tencent.com"}
}

// Covers reports whether pattern matches host on some port.
func Covers(pattern, host string) bool {
	if h, _, err := net.SplitHostPort(pattern); err == nil {
		pattern = h
	}
	return matchHost(strings.ToLower(pattern), strings.ToLower(host))
}

// ValidatePattern reports whether s is a well-formed egress pattern. A wildcard over a public
// suffix ("*.com", "*.co.uk", "*.github.io") is refused: it would allow most of the internet.
func ValidatePattern(s string) error {
	h := s
	if host, port, err := net.SplitHostPort(s); err == nil {
		h = host
		if port == "" || strings.Trim(port, "0123456789") != "" {
			return fmt.Errorf("egress pattern %q: bad port", s)
		}
	}
	domain, wildcard := strings.CutPrefix(h, "*.")
	if domain == "" || strings.ContainsAny(domain, "/*?@ ") {
		return fmt.Errorf("egress pattern %q: want a host name, an IP or *.domain", s)
	}
	if wildcard {
		if _, err := netip.ParseAddr(domain); err == nil {
			return fmt.Errorf("egress pattern %q: a wildcard needs a domain, not an IP", s)
		}
		d := strings.ToLower(strings.TrimSuffix(domain, "."))
		if suffix, _ := publicsuffix.PublicSuffix(d); suffix == d {
			return fmt.Errorf("egress pattern %q: %s is a public suffix; a wildcard over it would allow every site under it", s, d)
		}
	}
	return nil
}
