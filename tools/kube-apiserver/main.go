// Command kube-apiserver is the upstream kube-apiserver, built from the
// k8s.io/kubernetes Go module for the tests' real API server
// (tests/common/kube_apiserver.rs). It is upstream's own main, unchanged:
// k8s.io/kubernetes/cmd/kube-apiserver/apiserver.go.
package main

import (
	"os"

	_ "time/tzdata" // for CronJob Time Zones

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
