package definition_test

import (
	"fmt"
	"log"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// exampleDefinition is a small package: a manifest and a file, no images,
// so that the examples need no image source.
const exampleDefinition = `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata:
  name: hello
  version: 1.0.0
components:
  - name: app
    manifests:
      - name: hello
        files: [hello.yaml]
    files:
      - source: motd.txt
        target: /etc/motd
`

func ExampleParse() {
	def, err := definition.Parse("ferry.yaml", []byte(exampleDefinition))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(def.Metadata.Name, def.Metadata.Version, len(def.Components), "component")
	// Output: hello 1.0.0 1 component
}

// ExampleAddImages adds an image to a component's list,
// keeping the definition's comments.
func ExampleAddImages() {
	def := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: web # the shop\n  version: 1.0.0\ncomponents:\n  - name: web\n    images:\n      - nginx:1.27 # front\n"
	out, err := definition.AddImages("ferry.yaml", []byte(def), map[string][]string{"web": {"docker.io/fluent/fluent-bit:3.2"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(out))
	// Output:
	// apiVersion: ferry.dev/v1alpha1
	// kind: Package
	// metadata:
	//   name: web # the shop
	//   version: 1.0.0
	// components:
	//   - name: web
	//     images:
	//       - nginx:1.27 # front
	//       - docker.io/fluent/fluent-bit:3.2
}
