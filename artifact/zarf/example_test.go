package zarf_test

import (
	"fmt"

	"github.com/ferrypkg/ferry/artifact/zarf"
)

func ExampleConvert() {
	res, err := zarf.Convert("zarf.yaml", []byte(`kind: ZarfPackageConfig
metadata:
  name: podinfo
  version: 6.7.0
components:
  - name: podinfo
    required: true
    images:
      - ghcr.io/stefanprodan/podinfo:6.7.0
    charts:
      - name: podinfo
        url: oci://ghcr.io/stefanprodan/charts/podinfo
        version: 6.7.0
        namespace: podinfo
    actions:
      onDeploy:
        after:
          - cmd: kubectl -n podinfo rollout status deploy/podinfo
`), zarf.ConvertOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(res.Definition))
	for _, g := range res.Gaps {
		fmt.Println(g)
	}
	// Output:
	// # Converted from zarf.yaml by `ferry package convert`: read its report of what ferry does differently.
	// apiVersion: ferry.dev/v1alpha1
	// kind: Package
	// metadata:
	//   name: podinfo
	//   version: 6.7.0
	// components:
	//   - name: podinfo
	//     required: true
	//     images:
	//       - ghcr.io/stefanprodan/podinfo:6.7.0
	//     charts:
	//       - url: oci://ghcr.io/stefanprodan/charts/podinfo
	//         version: 6.7.0
	//         namespace: podinfo
	//         releaseName: podinfo
	// zarf.yaml:18: components[0].actions.onDeploy.after[0]: onDeploy after: command "kubectl -n podinfo rollout status deploy/podinfo" — none: ferry deploy runs no commands; in the cluster, a Helm post-install hook Job or a Job in the component's manifests
}
