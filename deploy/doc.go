// Package deploy holds the actions a workstation (or the agent's upload
// endpoint) runs against a cluster that ferry init set up, each a struct
// whose fields are its options and whose Run does it (Helm's pkg/action is
// the model): Deploy verifies a package, pushes it into the in-cluster
// registry by digest and applies its Package object for the controller to
// install; Remove deletes Packages and waits until the controller has taken
// out what they installed. The Package client (PackageClient, ApplyPackage,
// WaitPackage, DeletePackage, Migrate) and the cluster's trusted keys
// (EnsureKeySecret, TrustedKeys) are the pieces they share with other
// callers.
//
// What the controller does in the cluster (Helm, manifests, records) is
// package deploy/rollout.
package deploy
