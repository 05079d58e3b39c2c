package inject

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/ferrypkg/ferry/inject/loader"
	"github.com/ferrypkg/ferry/injector"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// Defaults of Options; the namespace, ports and labels are cluster's
// (package internal/cluster): the injector stands in for the registry.
const (
	DefaultName             = "ferry-injector"
	DefaultChunkSize        = 512 << 10 // smaller than the limit: large ConfigMaps slow down small control planes
	DefaultMaxConfigMapSize = 1 << 20   // the API server's limit on data + binaryData, keys included
	// RunAsUser is the UID and GID the injector runs as; any UID works.
	RunAsUser = 65532
)

// Paths inside the injector container.
const (
	BootDir     = "/ferry/boot"               // loader and stage-1 chunks (ConfigMaps, mode 0555)
	PayloadDir  = "/ferry/payload"            // payload chunks (ConfigMaps, mode 0444)
	WorkDir     = "/ferry/work"               // emptyDir: stage 1 and the extracted layout
	LoaderKey   = "loader"                    // the loader's key in the first boot ConfigMap
	Stage1Path  = WorkDir + "/ferry-injector" // where the loader joins stage 1
	LayoutPath  = WorkDir + "/registry"       // where stage 1 extracts the payload
	stage1Chunk = "stage1-"
)

// Labels and annotations on the objects of a plan, besides cluster's
// (cluster.LabelName, cluster.LabelManagedBy, cluster.LabelComponent
// "injector").
const (
	LabelPart            = "ferry.dev/injector-part" // "boot" or "payload" on ConfigMaps
	AnnotationPayload    = "ferry.dev/payload-digest"
	AnnotationStage1     = "ferry.dev/stage1-digest"
	AnnotationChunkCount = "ferry.dev/payload-chunks"
)

// Options describe one injector. Zero values take the documented defaults.
type Options struct {
	// Namespace of every object; cluster.DefaultNamespace if empty.
	Namespace string
	// Name of the Pod and Service and prefix of the ConfigMaps;
	// DefaultName if empty.
	Name string
	// NodeName pins the Pod to the node holding Image. Required.
	NodeName string
	// Image is an image already present on the node, borrowed only for its
	// container runtime set-up; none of its files are used. Required.
	Image string
	// Arch is the node's GOARCH, "amd64" or "arm64". Required.
	Arch string
	// Stage1 is the stage-1 binary for Arch (see LoadStage1). Required.
	Stage1 []byte
	// Payload is the registry image (see NewPayload). Required.
	Payload Payload
	// ChunkSize is the size of stage-1 and payload chunks;
	// DefaultChunkSize if ≤ 0.
	ChunkSize int
	// MaxConfigMapSize bounds each ConfigMap's keys plus values;
	// DefaultMaxConfigMapSize if ≤ 0. Chunks are packed into as few
	// ConfigMaps as fit.
	MaxConfigMapSize int
	// Port is the container port; cluster.RegistryPort if 0. NodePort is
	// the Service's node port; cluster.DefaultNodePort if 0.
	Port, NodePort int32
}

// Plan is everything ferry init creates for the injector: ConfigMaps, Pod
// and Service, in the order a manifest lists them (init itself makes the
// Service first, createInjector).
type Plan struct {
	ConfigMaps []corev1.ConfigMap
	Pod        corev1.Pod
	Service    corev1.Service
	// PayloadChunks and Stage1Chunks count the chunks of each.
	PayloadChunks, Stage1Chunks int
	Stage1Digest                digest.Digest
}

// item is one ConfigMap key.
type item struct {
	part, key string
	data      []byte
}

// NewPlan splits the loader, stage 1 and the payload into ConfigMaps and
// renders the injector Pod and Service. The result depends only on opts.
func NewPlan(opts Options) (*Plan, error) {
	if opts.Namespace == "" {
		opts.Namespace = cluster.DefaultNamespace
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	if opts.MaxConfigMapSize <= 0 {
		opts.MaxConfigMapSize = DefaultMaxConfigMapSize
	}
	if opts.Port == 0 {
		opts.Port = cluster.RegistryPort
	}
	if opts.NodePort == 0 {
		opts.NodePort = cluster.DefaultNodePort
	}
	switch {
	case opts.NodeName == "":
		return nil, errors.New("inject plan: node name is required")
	case opts.Image == "":
		return nil, errors.New("inject plan: borrowed image is required")
	case len(opts.Stage1) == 0:
		return nil, errors.New("inject plan: stage-1 binary is required")
	case len(opts.Payload.Data) == 0 || opts.Payload.Digest.Validate() != nil || opts.Payload.Digest.Algorithm() != digest.SHA256:
		return nil, errors.New("inject plan: payload with a sha256 digest is required")
	case opts.Payload.Digest != digest.FromBytes(opts.Payload.Data):
		return nil, fmt.Errorf("inject plan: payload does not match its digest %s", opts.Payload.Digest)
	}
	ldr, err := loader.ELF(opts.Arch)
	if err != nil {
		return nil, fmt.Errorf("inject plan: %w", err)
	}
	p := &Plan{Stage1Digest: digest.FromBytes(opts.Stage1)}

	boot := []item{{"boot", LoaderKey, ldr}}
	for i, c := range split(opts.Stage1, opts.ChunkSize) {
		boot = append(boot, item{"boot", injector.ChunkName(stage1Chunk, i), c})
	}
	p.Stage1Chunks = len(boot) - 1
	var payload []item
	for i, c := range split(opts.Payload.Data, opts.ChunkSize) {
		payload = append(payload, item{"payload", injector.ChunkName(injector.DefaultChunkPrefix, i), c})
	}
	p.PayloadChunks = len(payload)

	labels := func(part string) map[string]string {
		l := map[string]string{cluster.LabelName: opts.Name, cluster.LabelManagedBy: cluster.ManagedBy, cluster.LabelComponent: "injector"}
		if part != "" {
			l[LabelPart] = part
		}
		return l
	}
	annotations := map[string]string{
		AnnotationPayload:    opts.Payload.Digest.String(),
		AnnotationStage1:     p.Stage1Digest.String(),
		AnnotationChunkCount: strconv.Itoa(p.PayloadChunks),
	}
	var bootSources, payloadSources []corev1.VolumeProjection
	for _, group := range [][]item{boot, payload} {
		packs, err := pack(group, opts.MaxConfigMapSize)
		if err != nil {
			return nil, fmt.Errorf("inject plan: %w", err)
		}
		for i, items := range packs {
			part := items[0].part
			cm := corev1.ConfigMap{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{
					Name:        fmt.Sprintf("%s-%s-%03d", opts.Name, part, i),
					Namespace:   opts.Namespace,
					Labels:      labels(part),
					Annotations: annotations,
				},
				BinaryData: map[string][]byte{},
				Immutable:  ptr(true),
			}
			proj := corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name},
			}}
			for _, it := range items {
				cm.BinaryData[it.key] = it.data
				proj.ConfigMap.Items = append(proj.ConfigMap.Items, corev1.KeyToPath{Key: it.key, Path: it.key})
			}
			p.ConfigMaps = append(p.ConfigMaps, cm)
			if part == "boot" {
				bootSources = append(bootSources, proj)
			} else {
				payloadSources = append(payloadSources, proj)
			}
		}
	}

	command := []string{BootDir + "/" + LoaderKey, Stage1Path}
	for i := range p.Stage1Chunks {
		command = append(command, BootDir+"/"+injector.ChunkName(stage1Chunk, i))
	}
	command = append(command, "--",
		"-chunks", PayloadDir,
		"-count", strconv.Itoa(p.PayloadChunks),
		"-sha256", opts.Payload.Digest.String(),
		"-dir", LayoutPath,
		"-addr", ":"+strconv.Itoa(int(opts.Port)),
		"-self-sha256", p.Stage1Digest.String(),
	)
	// The work volume holds stage 1 and the extracted layout (the tar
	// minus its headers), with room for a restart's re-extraction.
	workSize := resource.NewQuantity(int64(len(opts.Stage1))+2*int64(len(opts.Payload.Data))+(16<<20), resource.BinarySI)
	p.Pod = corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: opts.Name, Namespace: opts.Namespace,
			Labels: labels(""), Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			NodeName:                      opts.NodeName,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(15)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr(true),
				RunAsUser:      ptr(int64(RunAsUser)),
				RunAsGroup:     ptr(int64(RunAsUser)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "injector",
				Image:           opts.Image,
				ImagePullPolicy: corev1.PullNever,
				Command:         command,
				// A refusal (damaged chunk, digest mismatch) is the message.
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				WorkingDir:               WorkDir,
				Ports:                    []corev1.ContainerPort{{Name: "registry", ContainerPort: opts.Port, Protocol: corev1.ProtocolTCP}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/v2/", Port: intstr.FromString("registry")}},
					PeriodSeconds:    1, // init waits for it
					TimeoutSeconds:   2,
					FailureThreshold: 3,
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr(false),
					Privileged:               ptr(false),
					ReadOnlyRootFilesystem:   ptr(true),
					RunAsNonRoot:             ptr(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "boot", MountPath: BootDir, ReadOnly: true},
					{Name: "payload", MountPath: PayloadDir, ReadOnly: true},
					{Name: "work", MountPath: WorkDir},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "boot", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: bootSources, DefaultMode: ptr(int32(0o555))}}},
				{Name: "payload", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: payloadSources, DefaultMode: ptr(int32(0o444))}}},
				{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: workSize}}},
			},
		},
	}
	// The Service is the registry's, by name: the injector's until the
	// hand-over, which turns it to the registry's Pods in place — only its
	// endpoints change, one kube-proxy sync instead of three (a Service
	// gone, a Service made, its endpoints), which its default min-sync
	// period of 1 s could not all take at once.
	p.Service = corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: cluster.RegistryName, Namespace: opts.Namespace,
			Labels: labels(""), Annotations: annotations,
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{cluster.LabelName: opts.Name, cluster.LabelComponent: "injector"},
			// The NodePort leads to the Pod as soon as it has an address,
			// not once it is Ready: kube-proxy's sync (up to a second)
			// overlaps the injector's start instead of following it. Only
			// init's own pull calls it, once it answers.
			PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{{
				Name: "registry", Protocol: corev1.ProtocolTCP,
				Port: opts.Port, TargetPort: intstr.FromString("registry"), NodePort: opts.NodePort,
			}},
		},
	}
	return p, nil
}

// split cuts b into chunks of at most n bytes.
func split(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n:n])
		b = b[n:]
	}
	return append(out, b)
}

// pack groups items, in order, into as few ConfigMaps as stay within max
// bytes of keys plus values.
func pack(items []item, max int) ([][]item, error) {
	var out [][]item
	size := 0
	for _, it := range items {
		n := len(it.key) + len(it.data)
		if n > max {
			return nil, fmt.Errorf("ConfigMap key %s: %d bytes exceed the %d-byte ConfigMap limit (lower the chunk size)", it.key, n, max)
		}
		if len(out) == 0 || size+n > max {
			out = append(out, nil)
			size = 0
		}
		out[len(out)-1] = append(out[len(out)-1], it)
		size += n
	}
	return out, nil
}

// ConfigMapSize is what the API server counts against its 1 MiB limit:
// every key plus every value of data and binaryData.
func ConfigMapSize(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	for k, v := range cm.BinaryData {
		n += len(k) + len(v)
	}
	return n
}

// YAML renders the plan as one multi-document YAML stream in apply order,
// byte-identical for identical options.
func (p *Plan) YAML() ([]byte, error) {
	var out []byte
	objs := []any{}
	for i := range p.ConfigMaps {
		objs = append(objs, &p.ConfigMaps[i])
	}
	objs = append(objs, &p.Pod, &p.Service)
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		out = append(append(out, "---\n"...), b...)
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }
