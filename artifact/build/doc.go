// Package build makes packages from definitions: Create resolves every
// image and chart of a definition (artifact/definition) to a digest,
// fetches each blob once, makes SBOMs and image evidence, checks image
// policies, and writes one archive through artifact.Plan; FindImages lists
// the images a definition's charts and manifests use.
package build
