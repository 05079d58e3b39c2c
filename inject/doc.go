// Package inject is the host side of the cluster bootstrap (DESIGN.md §4):
// it turns the registry image (an OCI image layout) into a payload tar with
// its sha256, splits the stage-0 loader, the stage-1 injector and the
// payload into ConfigMaps, and renders the injector Pod and its NodePort
// Service. Everything here is pure planning; applying the objects to a
// cluster is ferry init's job.
//
// Inside the Pod the loader (package inject/loader) joins stage 1 from the
// "boot" volume into an emptyDir and execs it; stage 1 (package injector)
// joins, verifies and extracts the payload from the "payload" volume and
// serves it read-only on port 5000, exposed as NodePort 31999.
package inject
