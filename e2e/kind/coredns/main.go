// CoreDNS for the offline kind cluster: CoreDNS's own server (coremain) with only the plugins a
// cluster-names-only Corefile uses. `forward` is deliberately not compiled in, so no Corefile can make
// this binary send a query upstream (docs/tasks/e2e.md "The offline kind cluster": cluster DNS must not forward).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"

	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives is the plugin order, a subsequence of CoreDNS's plugin.cfg order (zdirectives.go).
var directives = []string{
	"reload", "ready", "health", "prometheus", "errors", "log", "loadbalance", "cache", "kubernetes", "loop",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
