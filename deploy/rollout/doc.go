// Package rollout is what the Package controller (package deploy/controller)
// does to a package's release in the cluster, once the package is verified
// and in the in-cluster registry: Apply installs or upgrades its charts with
// the Helm SDK and applies its manifests (server-side apply), every image
// rewritten to that registry by digest, prunes what an earlier version
// installed and this one does not, and records the package; Uninstall takes
// it out again (releases, objects, the CRDs its charts created, images, pull
// secrets), then CollectGarbage runs the registry's garbage collection. The
// records of what is deployed are Secrets of ferry's namespace (State), read
// by list, remove and the agent (package deploy/agent).
//
// The workstation's side, which pushes a package and asks the controller
// for it, is package deploy.
package rollout
