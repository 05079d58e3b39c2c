package install

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
)

// The Package controller's objects, as Install makes them.
const (
	// ControllerHealthPort serves /healthz and /readyz.
	ControllerHealthPort = 8081
)

func controllerLabels() map[string]string {
	return map[string]string{cluster.LabelName: cluster.ControllerName, cluster.LabelManagedBy: cluster.ManagedBy, cluster.LabelComponent: "controller"}
}

// controller runs the Package controller (`ferry controller`, from the
// agent's image; its CRD and account are controllerObjects'). It installs whatever charts and manifests
// the packages hold, in any namespace, as `ferry deploy` did with the
// user's rights: like Helm's and Flux's controllers it is bound to
// cluster-admin. It returns how long its Deployment took to roll out.
func (in *installer) controller(ctx context.Context) (time.Duration, error) {
	if err := kube.ApplyDeployment(ctx, in.cs, in.controllerDeployment()); err != nil {
		return 0, err
	}
	l := controllerLabels()
	start := time.Now()
	if _, err := kube.DeletePodsOnDeadNodes(ctx, in.cs, in.ns, l); err != nil {
		return 0, err
	}
	stop := kube.Tend(ctx, in.cs, in.ns, l)
	err := kube.WaitRollout(ctx, in.cs, in.ns, cluster.ControllerName, in.opts.WaitTimeout)
	stop()
	return time.Since(start), err
}

// controllerObjects applies the Package CRD, waits until it is
// established, and gives the controller its account: cluster-admin (it
// installs what packages hold).
func (in *installer) controllerObjects(ctx context.Context) error {
	if in.opts.Extensions == nil {
		return fmt.Errorf("install the Package controller: no client for CustomResourceDefinitions (InstallOptions.Extensions)")
	}
	crd, err := v1alpha1.CRD()
	if err != nil {
		return err
	}
	crd.Labels = controllerLabels()
	crds := in.opts.Extensions.ApiextensionsV1().CustomResourceDefinitions()
	if err := kube.Upsert(ctx, crds, crd, func(cur, want *apiextensionsv1.CustomResourceDefinition) {
		cur.Labels, cur.Spec = want.Labels, want.Spec
	}); err != nil {
		return fmt.Errorf("apply CustomResourceDefinition %s: %w", crd.Name, err)
	}
	err = kube.Poll(ctx, in.opts.WaitTimeout, func() (bool, error) {
		cur, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}, "CustomResourceDefinition "+crd.Name+" is not established")
	if err != nil {
		return err
	}

	l := controllerLabels()
	meta := metav1.ObjectMeta{Name: cluster.ControllerName, Namespace: in.ns, Labels: l}
	if err := kube.Upsert(ctx, in.cs.CoreV1().ServiceAccounts(in.ns), &corev1.ServiceAccount{ObjectMeta: meta},
		func(cur, want *corev1.ServiceAccount) { cur.Labels = want.Labels }); err != nil {
		return err
	}
	name := cluster.ControllerName
	if in.ns != cluster.DefaultNamespace {
		name += "-" + in.ns
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, OwnerReferences: in.owner},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: cluster.ControllerName, Namespace: in.ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
	}
	return kube.Upsert(ctx, in.cs.RbacV1().ClusterRoleBindings(), binding, func(cur, want *rbacv1.ClusterRoleBinding) {
		cur.Labels, cur.OwnerReferences, cur.Subjects = want.Labels, want.OwnerReferences, want.Subjects
	})
}

func (in *installer) controllerArgs() []string {
	args := []string{"controller", "--namespace=" + in.ns, fmt.Sprintf("--health-addr=:%d", ControllerHealthPort)}
	if in.opts.ControllerResync > 0 {
		args = append(args, "--resync="+in.opts.ControllerResync.String())
	}
	if in.opts.ControllerDriftCheck > 0 {
		args = append(args, "--drift-check="+in.opts.ControllerDriftCheck.String())
	}
	if c := in.opts.Certificates; c.Validity > 0 {
		args = append(args, "--cert-validity="+c.Validity.String())
	}
	if c := in.opts.Certificates; c.RenewBefore > 0 {
		args = append(args, "--cert-renew-before="+c.RenewBefore.String())
	}
	return args
}

// controllerDeployment runs one controller; a second one (during a
// rollout) waits for the leader's Lease.
func (in *installer) controllerDeployment() *appsv1.Deployment {
	l := controllerLabels()
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.ControllerName, Namespace: in.ns, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				// 60 s to finish the reconcile under way and hand the Lease over.
				Spec: withGrace(60, in.podSpec(cluster.ControllerName, corev1.Container{
					Name: "controller",
					Args: in.controllerArgs(),
					// Helm and the discovery cache write under $HOME.
					Env:   []corev1.EnvVar{{Name: "HOME", Value: "/tmp"}},
					Ports: []corev1.ContainerPort{{Name: "health", ContainerPort: ControllerHealthPort, Protocol: corev1.ProtocolTCP}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("health")}},
						PeriodSeconds: 1, // init waits for it
					},
					LivenessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("health")}},
						PeriodSeconds: 10, FailureThreshold: 6,
					},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
					}},
					VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
				}, []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}})),
			},
		},
	}
}
