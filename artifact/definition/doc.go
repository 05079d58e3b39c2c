// Package definition is ferry.yaml, the package definition: its schema
// (Definition and its sections), the parser that validates it and locates
// every problem by file, line and field (Load, Parse, Error), the edits
// that keep its comments (AddImages), and its folder, through which every
// file it names is read (Folder).
//
// It does not import package artifact, which imports it:
// artifact.Create takes a *Definition, and the Zarf converter
// (artifact/zarf) writes one.
package definition
