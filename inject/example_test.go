package inject_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing/fstest"

	"github.com/ferrypkg/ferry/inject"
)

func ExampleNewPlan() {
	// The registry image as an OCI layout (os.DirFS(dir) in real use).
	layout := fstest.MapFS{
		"oci-layout": {Data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		"index.json": {Data: []byte(`{"schemaVersion":2,"manifests":[]}`)},
	}
	payload, err := inject.NewPayload(layout)
	if err != nil {
		panic(err)
	}
	plan, err := inject.NewPlan(inject.Options{
		NodeName: "node-1",
		Image:    "registry.k8s.io/pause:3.10", // already on node-1
		Arch:     "amd64",
		Stage1:   bytes.Repeat([]byte{0x90}, 1200<<10), // inject.LoadStage1("bin", "amd64") in real use
		Payload:  payload,
	})
	if err != nil {
		panic(err)
	}
	for _, cm := range plan.ConfigMaps {
		var keys []string
		for k := range cm.BinaryData {
			keys = append(keys, k)
		}
		fmt.Println(cm.Name, len(keys), "keys,", inject.ConfigMapSize(&cm) <= inject.DefaultMaxConfigMapSize)
	}
	c := plan.Pod.Spec.Containers[0]
	fmt.Println(strings.Join(c.Command[:5], " "))
	fmt.Println(plan.Service.Spec.Type, plan.Service.Spec.Ports[0].NodePort)
	// Output:
	// ferry-injector-boot-000 2 keys, true
	// ferry-injector-boot-001 2 keys, true
	// ferry-injector-payload-000 1 keys, true
	// /ferry/boot/loader /ferry/work/ferry-injector /ferry/boot/stage1-00000 /ferry/boot/stage1-00001 /ferry/boot/stage1-00002
	// NodePort 31999
}
