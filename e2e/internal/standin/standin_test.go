package standin

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

const stream = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    metadata: {labels: {app: web}}
    spec:
      securityContext: {runAsNonRoot: true}
      volumes: [{name: tools, emptyDir: {}}]
      initContainers:
        - name: copy
          image: example.com/tools:1
          securityContext: {runAsUser: 100}
          command: [/bin/sh, -c, "cp /t /opt/tools/"]
          volumeMounts: [{name: tools, mountPath: /opt/tools}]
      containers:
        - name: server
          image: example.com/app:1
          args: ["--port=8443", "--node=$(NODE_NAME)"]
          ports: [{name: https, containerPort: 8443}, {name: metrics, containerPort: 9090}, {containerPort: 7946, protocol: UDP}]
          readinessProbe: {httpGet: {port: https, scheme: HTTPS, path: /readyz}}
          livenessProbe: {tcpSocket: {port: 7000}}
          startupProbe: {exec: {command: [/bin/check, --quick]}}
        - name: helper
          image: example.com/app:1
          command: [/opt/tools/helper]
          volumeMounts: [{name: tools, mountPath: /opt/tools}]
          readinessProbe: {httpGet: {port: 9090}}
          lifecycle: {preStop: {exec: {command: [sleep, "5"]}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: other}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: m, image: example.com/app:1, args: [migrate]}]
---
apiVersion: v1
kind: Service
metadata: {name: web-hook}
spec:
  selector: {app: web}
  ports: [{port: 443, targetPort: https}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: web-validating}
webhooks:
  - name: a.example.com
    clientConfig: {service: {name: web-hook, namespace: ns, path: /validate}}
  - name: b.example.com
    clientConfig: {url: "https://elsewhere.example.com/"}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  conversion:
    strategy: Webhook
    webhook: {clientConfig: {service: {name: web-hook, namespace: ns, port: 443, path: /convert}}}
`

// TestPlan: each container's command line is a role of its image; a server
// listens on its TCP ports and on the probe ports no sibling declares, a Job,
// an init container, an exec probe and a lifecycle hook exit; a program run
// from a shared volume is installed there by the init container mounting
// it; the webhook's and the conversion's Service leads to the container
// whose certificate names it; an image run with runAsNonRoot and no
// runAsUser must name a non-root user.
func TestPlan(t *testing.T) {
	plans, err := Plan([]byte(stream), "ns", "/tiny")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(Refs(plans), " "); got != "example.com/app:1 example.com/tools:1" {
		t.Fatalf("images %s", got)
	}
	got := func(ref string) string {
		b, err := json.Marshal(plans[ref])
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for ref, want := range map[string]string{
		"example.com/app:1": `{"Ref":"example.com/app:1","Paths":["/bin/check","/usr/bin/sleep"],"NonRoot":true,"Config":{"roles":[` +
			`{"argv":["/bin/check","--quick"],"exit":true},` +
			`{"argv":["/opt/tools/helper"]},` +
			`{"argv":["/tiny","--port=8443","--node=$(NODE_NAME)"],"listen":[7000,8443,9090],` +
			`"dnsNames":["web-hook.ns.svc","web-hook.ns.svc.cluster.local"],` +
			`"caBundles":[{"resource":"customresourcedefinitions","name":"things.example.com","service":"ns/web-hook"},` +
			`{"resource":"validatingwebhookconfigurations","name":"web-validating","service":"ns/web-hook"}]},` +
			`{"argv":["/tiny","migrate"],"exit":true},` +
			`{"argv":["sleep","5"],"exit":true}]}}`,
		"example.com/tools:1": `{"Ref":"example.com/tools:1","Paths":["/bin/sh"],"NonRoot":false,"Config":{"roles":[` +
			`{"argv":["/bin/sh","-c","cp /t /opt/tools/"],"exit":true,"install":["/opt/tools/helper"]}]}}`,
	} {
		if g := got(ref); g != want {
			t.Errorf("%s:\n%s\nwant\n%s", ref, g, want)
		}
	}
	again, _ := Plan([]byte(stream), "ns", "/tiny")
	for ref := range plans {
		a, _ := json.Marshal(again[ref])
		if string(a) != got(ref) {
			t.Errorf("%s: another plan of the same stream differs", ref)
		}
	}
}

func TestPlanRefuses(t *testing.T) {
	pod := func(spec string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n" + spec
	}
	for _, tc := range []struct{ name, stream, want string }{
		{"grpc probe", pod("  containers: [{name: c, image: i, livenessProbe: {grpc: {port: 9000}}}]"), "gRPC"},
		{"unfilled volume", pod("  volumes: [{name: v, emptyDir: {}}]\n  containers: [{name: c, image: i, command: [/v/run], volumeMounts: [{name: v, mountPath: /v}]}]"), "no init container fills"},
		{"probe on an unnamed port", pod("  containers: [{name: c, image: i, readinessProbe: {httpGet: {port: web}}}]"), "no port web"},
		{"a command line both ways", pod("  restartPolicy: Never\n  containers: [{name: c, image: i}]") + "\n---\n" +
			"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {template: {spec: {containers: [{name: c, image: i}]}}}", "both runs once and runs on"},
		{"webhook without its Service", "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: m}\nwebhooks: [{name: x, clientConfig: {service: {name: s, namespace: ns}}}]", "no Service ns/s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Plan([]byte(tc.stream), "ns", "/tiny"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestPlanThirdPartyCharts plans every chart of thirdparty.Charts as rendered
// for the e2e cluster: kyverno's 8 images (hooks' and tests' included),
// gatekeeper's webhook, metallb's programs copied into volumes.
func TestPlanThirdPartyCharts(t *testing.T) {
	want := map[string]struct {
		images int
		has    string
	}{
		"kyverno":    {8, `"argv":["/bin/sh","-c","sleep 20 ; wget`},
		"gatekeeper": {3, `"service":"gatekeeper/gatekeeper-webhook-service"`},
		"metallb":    {4, `"install":["/etc/frr_metrics/frr-metrics"]`},
	}
	for _, c := range thirdparty.Charts {
		t.Run(c.Name, func(t *testing.T) {
			out, err := Render(c.Dir(t), c.Name, c.Name, c.Values, thirdparty.KubeVersion)
			if err != nil {
				t.Fatal(err)
			}
			plans, err := Plan(out, c.Name, "/tiny")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(plans)
			if w := want[c.Name]; len(plans) != w.images || !strings.Contains(string(b), w.has) {
				t.Errorf("%d images, want %d, with %s: %s", len(plans), w.images, w.has, b)
			}
			objs, err := Objects(out, c.Name, func(_, kind string) bool { return kind != "CustomResourceDefinition" })
			if err != nil || len(objs) == 0 {
				t.Fatalf("objects: %d, %v", len(objs), err)
			}
		})
	}
}
