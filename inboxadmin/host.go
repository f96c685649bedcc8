package inboxadmin

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// hosts decides which Host a request may name. A page in the operator's
// browser can reach the admin page through a name it rebinds to this
// machine (DNS rebinding); the browser then counts the page's own origin as
// that name, so the cross-origin check passes, but the Host header still
// names it. Checking the Host against the names the page serves refuses
// such requests, reads included.
type hosts struct {
	any bool
	// names maps a lower-case host name or IP address to the ports it is
	// allowed on; an empty port allows every port.
	names map[string][]string
}

// newHosts checks the entries of Config.AllowedHosts.
func newHosts(entries []string) (hosts, error) {
	h := hosts{names: map[string][]string{}}
	for _, e := range entries {
		if e == "*" {
			h.any = true
			continue
		}
		name, port, ok := splitHost(e)
		if !ok || strings.ContainsAny(e, "/?#@*\\") || strings.ContainsFunc(e, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
			return hosts{}, fmt.Errorf("inboxadmin: Config.AllowedHosts %q: want a host name or IP address, with or without a port (such as admin.example.com or 10.0.0.5:8080), or *", e)
		}
		h.names[name] = append(h.names[name], port)
	}
	return h, nil
}

// splitHost splits a Host value into its lower-case name or address,
// without the brackets of an IPv6 address, and its port, if any.
func splitHost(host string) (name, port string, ok bool) {
	name = host
	if h, p, err := net.SplitHostPort(host); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return "", "", false
		}
		name, port = h, p
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	if name == "" {
		return "", "", false
	}
	if ip := net.ParseIP(name); ip != nil {
		return ip.String(), port, true
	}
	return strings.ToLower(name), port, true
}

// allowed reports whether the page serves a request naming host: a
// loopback name or address (never a rebinding target: the browser resolves
// localhost itself), or one of Config.AllowedHosts.
func (h hosts) allowed(host string) bool {
	if h.any {
		return true
	}
	name, port, ok := splitHost(host)
	if !ok {
		return false
	}
	if name == "localhost" {
		return true
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, p := range h.names[name] {
		if p == "" || p == port {
			return true
		}
	}
	return false
}

// checkHost refuses a request whose Host the page does not serve, with 421
// Misdirected Request.
func (h *Handler) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if h.hosts.allowed(r.Host) {
		return true
	}
	h.fail(w, r, http.StatusMisdirectedRequest, fmt.Errorf("host %q is not one this page serves: it answers loopback names and addresses and the hosts of inboxadmin.Config.AllowedHosts ('inbox admin --allowed-host'), so that a site cannot reach it through a name it points at this machine (DNS rebinding)", r.Host))
	return false
}
