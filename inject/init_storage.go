package inject

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
)

// ErrStrands means a change of the registry's storage would leave the
// deployed packages' content behind, in the storage it leaves.
var ErrStrands = errors.New("would strand them")

// storage checks the storage choice before anything changes: replicas the
// storage allows, the credentials Secret S3 needs, and a switch of storage
// that would strand what deployed packages use.

func (in *initRun) storage(ctx context.Context) (string, error) {
	o := in.opts
	if o.Replicas < 1 {
		return "", fmt.Errorf("replicas %d: want at least 1", o.Replicas)
	}
	want := "filesystem " + o.StorageDir
	if o.S3 == nil {
		if o.Replicas != 1 {
			return "", fmt.Errorf("filesystem storage runs 1 replica (its hostPath is on one node), not %d: use S3 storage for more", o.Replicas)
		}
	} else {
		want = o.S3.URL
		if o.S3.URL == "" || o.S3.CredentialsSecret == "" {
			return "", errors.New("S3 storage needs a URL and the name of the Secret with its credentials")
		}
		sec, err := in.cs.CoreV1().Secrets(in.ns).Get(ctx, o.S3.CredentialsSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("S3 credentials: Secret %s not found in namespace %s (create it with keys %s and %s)", o.S3.CredentialsSecret, in.ns, cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey)
		}
		if err != nil {
			return "", fmt.Errorf("S3 credentials: %w", err)
		}
		for _, k := range []string{cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey} {
			if len(sec.Data[k]) == 0 {
				return "", fmt.Errorf("S3 credentials: Secret %s has no %s", o.S3.CredentialsSecret, k)
			}
		}
	}
	d, err := in.cs.AppsV1().Deployments(in.ns).Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("%s, %d replica(s)", want, o.Replicas), nil
	}
	if err != nil {
		return "", err
	}
	cur := DeploymentStorage(d)
	if cur == "" {
		cur = "filesystem"
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "storage" && v.HostPath != nil {
				cur += " " + v.HostPath.Path
			}
		}
	}
	if cur == want {
		return fmt.Sprintf("%s, %d replica(s)", want, o.Replicas), nil
	}
	pkgs, err := in.cs.CoreV1().Secrets(in.ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelPackage})
	if err != nil {
		return "", err
	}
	if o.Migrate {
		if DeploymentStorage(d) != "" || o.S3 == nil {
			return "", fmt.Errorf("migrate from %s to %s: only from the filesystem to S3", cur, want)
		}
		in.migrate = d
		return fmt.Sprintf("switching from %s to %s, %d replica(s), copying every repository first", cur, want, o.Replicas), nil
	}
	if len(pkgs.Items) > 0 {
		return "", fmt.Errorf("the registry's storage is %s and %d deployed package(s) use it: switching to %s %w", cur, len(pkgs.Items), want, ErrStrands)
	}
	return fmt.Sprintf("switching from %s to %s, %d replica(s)", cur, want, o.Replicas), nil
}

// migrateStorage copies the filesystem registry's storage to the bucket
// before the registry moves there: a Job on the registry's node, from the
// registry's own image (in that node's cache), mounts the hostPath and runs
// `ferry-registry migrate` with the bucket's credentials. The registry is
// read-only meanwhile and serves pulls.
func (in *initRun) migrateStorage(ctx context.Context) (string, error) {
	d := in.migrate
	if d == nil {
		return "", nil
	}
	old := d.Spec.Template.Spec
	var dir string
	for _, v := range old.Volumes {
		if v.Name == "storage" && v.HostPath != nil {
			dir = v.HostPath.Path
		}
	}
	if dir == "" || old.NodeName == "" {
		return "", fmt.Errorf("the registry Deployment has no hostPath storage on a node to copy")
	}
	// The bucket's environment and CA, as the replicas will have them.
	nd := in.registryDeployment()
	env := nd.Spec.Template.Spec.Containers[0].Env
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range nd.Spec.Template.Spec.Volumes {
		if v.Name == "ca" {
			vols = append(vols, v)
		}
	}
	for _, m := range nd.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == "ca" {
			mounts = append(mounts, m)
		}
	}
	image := old.Containers[0].Image
	f := false
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.RegistryName + "-migrate", Namespace: in.ns, Labels: in.labels("registry-migrate")},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: in.labels("registry-migrate")},
				Spec: corev1.PodSpec{
					NodeName:      old.NodeName,
					RestartPolicy: corev1.RestartPolicyNever,
					// The registry's image, with the credentials its Pods
					// pulled it with: a kubelet that verifies them
					// (KubeletEnsureSecretPulledImages) would otherwise pull
					// it anew, anonymously, and be refused.
					ImagePullSecrets:             old.ImagePullSecrets,
					AutomountServiceAccountToken: &f,
					EnableServiceLinks:           &f,
					Volumes: append(vols,
						corev1.Volume{Name: "storage", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr(corev1.HostPathDirectory)}}}),
					Containers: []corev1.Container{{
						Name:                     "migrate",
						Image:                    image,
						ImagePullPolicy:          corev1.PullIfNotPresent,
						Command:                  []string{cluster.RegistryBinaryPath, "migrate", "--from-root", cluster.RegistryRoot},
						Env:                      env,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						// Root owns the hostPath storage (and writes the
						// read-only flag there).
						SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(0)), AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: ptr(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						VolumeMounts: append(mounts, corev1.VolumeMount{Name: "storage", MountPath: cluster.RegistryRoot}),
					}},
				},
			},
		},
	}
	jobs := in.cs.BatchV1().Jobs(in.ns)
	bg := metav1.DeletePropagationBackground
	if err := jobs.Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	if err := kube.Poll(ctx, time.Minute, func() (bool, error) {
		_, err := jobs.Get(ctx, job.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, "the previous migration Job gone"); err != nil {
		return "", err
	}
	if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create Job %s: %w", job.Name, err)
	}
	var done *batchv1.Job
	err := kube.Poll(ctx, 10*in.opts.WaitTimeout, func() (bool, error) {
		j, err := jobs.Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		done = j
		return j.Status.Succeeded > 0 || j.Status.Failed > 0, nil
	}, "Job "+job.Name+" done")
	if err != nil {
		return "", err
	}
	msg := in.jobMessage(ctx, job.Name)
	if done.Status.Succeeded == 0 {
		return "", fmt.Errorf("Job %s failed: %s", job.Name, msg)
	}
	_ = jobs.Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	return fmt.Sprintf("copied %s on %s to the bucket: %s", dir, old.NodeName, msg), nil
}

// jobMessage is the termination message of the Job's Pod.
func (in *initRun) jobMessage(ctx context.Context, job string) string {
	pods, err := in.cs.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if t := s.State.Terminated; t != nil {
				return strings.TrimSpace(t.Message)
			}
		}
	}
	return "no message"
}

// DeploymentStorage is the S3 storage URL a registry Deployment runs on,
// or "" for the filesystem.
func DeploymentStorage(d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == cluster.StorageEnv {
				return e.Value
			}
		}
	}
	return ""
}

// s3Container turns the filesystem registry's Pod into one replica of
// many on S3: the storage and the credentials from the environment, no
// hostPath and no node, spread over the nodes, ready when /v2/ answers.
func (in *initRun) s3Container(c *corev1.Container, spec *corev1.PodSpec) {
	s3 := in.opts.S3
	secretEnv := func(name, secret, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
		}}}
	}
	c.Args = []string{"--addr", ":" + strconv.Itoa(cluster.RegistryPort), "--htpasswd", "/auth/" + cluster.HtpasswdKey, "--drain-delay", drainDelay.String()}
	c.Env = []corev1.EnvVar{
		{Name: cluster.StorageEnv, Value: s3.URL},
		secretEnv(cluster.AccessKeyIDKey, s3.CredentialsSecret, cluster.AccessKeyIDKey),
		secretEnv(cluster.SecretAccessKeyKey, s3.CredentialsSecret, cluster.SecretAccessKeyKey),
		secretEnv(cluster.HTTPSecretEnv, cluster.AuthSecretName, cluster.HTTPSecretKey),
	}
	// Nothing on the node: no root needed.
	c.SecurityContext.RunAsUser, c.SecurityContext.RunAsNonRoot = ptr(int64(65532)), ptr(true)
	c.VolumeMounts = []corev1.VolumeMount{{Name: "auth", MountPath: "/auth", ReadOnly: true}}
	spec.Volumes = spec.Volumes[1:] // no hostPath
	if len(s3.CABundle) > 0 {
		c.Env = append(c.Env, corev1.EnvVar{Name: "AWS_CA_BUNDLE", Value: cluster.CADir + "/" + cluster.CAKey})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "ca", MountPath: cluster.CADir, ReadOnly: true})
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cluster.CAName},
		}}})
	}
	// Ready when the registry answers /v2/ (401: it asks for the account;
	// the image has no shell or HTTP client, the binary checks itself).
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{cluster.RegistryBinaryPath, "probe", "--addr", "127.0.0.1:" + strconv.Itoa(cluster.RegistryPort)}}},
		PeriodSeconds: 2, TimeoutSeconds: 2,
	}
	// A replica made on a node without its image (rescheduled, scaled up)
	// pulls it from the registry, which init pushed it to, with the
	// registry's account.
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: cluster.PullSecretName}}
	spec.NodeName = ""
	spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: in.labels("registry")},
	}}
	// A Pod on a node that went away is replaced after 30 s, not 5 min.
	for _, taint := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(30))})
	}
}

// storageObjects applies what the storage needs beside the Deployment: on
// S3 with several replicas a PodDisruptionBudget (a drain evicts one
// replica at a time), and the CA bundle's ConfigMap; on the filesystem
// neither.
func (in *initRun) storageObjects(ctx context.Context) error {
	pdbs := in.cs.PolicyV1().PodDisruptionBudgets(in.ns)
	if in.opts.S3 != nil && in.opts.Replicas > 1 {
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: cluster.RegistryName, Namespace: in.ns, Labels: in.labels("registry")},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr(intstr.FromInt32(1)),
				Selector:       &metav1.LabelSelector{MatchLabels: in.labels("registry")},
			},
		}
		cur, err := pdbs.Get(ctx, pdb.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := pdbs.Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("PodDisruptionBudget %s: %w", pdb.Name, err)
			}
		case err != nil:
			return err
		default:
			cur.Spec = pdb.Spec
			if _, err := pdbs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("PodDisruptionBudget %s: %w", pdb.Name, err)
			}
		}
	} else if err := pdbs.Delete(ctx, cluster.RegistryName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	cms := in.cs.CoreV1().ConfigMaps(in.ns)
	if in.opts.S3 == nil || len(in.opts.S3.CABundle) == 0 {
		if err := cms.Delete(ctx, cluster.CAName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.CAName, Namespace: in.ns, Labels: in.labels("registry")},
		Data:       map[string]string{cluster.CAKey: string(in.opts.S3.CABundle)},
	}
	cur, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	case err == nil:
		cur.Data = cm.Data
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	return nil
}
