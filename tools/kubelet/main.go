// Command kubelet is the upstream kubelet, built from the k8s.io/kubernetes Go
// module for the tests' real node (tests/it/common/node/). It is upstream's own
// main, unchanged: k8s.io/kubernetes/cmd/kubelet/kubelet.go. The module pins the
// same k8s.io/kubernetes and staging versions as tools/kube-apiserver
// (scripts/build-node checks that they agree).
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // for client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	command := app.NewKubeletCommand(context.Background())
	code := cli.Run(command)
	os.Exit(code)
}
