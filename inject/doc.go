// Package inject is the host side of the cluster bootstrap (docs/design/injector.md),
// what ferry init runs to put the registry into a cluster that has none.
//
// It builds the registry image (BuildImage: one static binary, no base
// image) and turns it into a payload tar with its sha256 (NewPayload);
// NewPlan splits the stage-0 loader, the stage-1 injector and the payload
// into ConfigMaps and renders the injector Pod and its NodePort Service,
// depending on its options only; RunInjector applies a plan and waits for
// the injector to serve, DeleteInjector removes it. Init does the whole
// bootstrap against a cluster, idempotently: credentials, the injector,
// the registry Deployment pulling its own image from it by digest, the
// hand-over of the NodePort, clean-up, and the state later commands read
// (see package internal/cluster for the names and schema it leaves).
//
// Inside the Pod the loader (package inject/loader) joins stage 1 from the
// "boot" volume into an emptyDir and execs it; stage 1 (package injector)
// joins, verifies and extracts the payload from the "payload" volume and
// serves it read-only on port 5000, exposed as NodePort 31999.
//
// The agent, installed by ferry init next, is package deploy/agent's.
package inject
