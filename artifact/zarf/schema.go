package zarf

// knownFields are the fields of each type of Zarf v0.60.0's zarf.schema.json
// (src/api/v1alpha1) that convert reads; a test holds them to the schema.
var knownFields = map[string][]string{
	"Constant":                       {"name", "value", "description", "autoIndent", "pattern"},
	"InteractiveVariable":            {"name", "sensitive", "autoIndent", "pattern", "type", "description", "default", "prompt"},
	"NamespacedObjectKindReference":  {"apiVersion", "kind", "namespace", "name"},
	"ZarfChart":                      {"name", "version", "url", "repoName", "gitPath", "localPath", "namespace", "releaseName", "noWait", "valuesFiles", "variables", "schemaValidation"},
	"ZarfChartVariable":              {"name", "description", "path"},
	"ZarfComponent":                  {"name", "description", "default", "required", "only", "group", "cosignKeyPath", "import", "manifests", "charts", "dataInjections", "files", "images", "repos", "scripts", "actions", "healthChecks"},
	"ZarfComponentAction":            {"mute", "maxTotalSeconds", "maxRetries", "dir", "env", "cmd", "shell", "setVariable", "setVariables", "description", "wait"},
	"ZarfComponentActionDefaults":    {"mute", "maxTotalSeconds", "maxRetries", "dir", "env", "shell"},
	"ZarfComponentActionSet":         {"defaults", "before", "after", "onSuccess", "onFailure"},
	"ZarfComponentActionWait":        {"cluster", "network"},
	"ZarfComponentActionWaitCluster": {"kind", "name", "namespace", "condition"},
	"ZarfComponentActionWaitNetwork": {"protocol", "address", "code"},
	"ZarfComponentActions":           {"onCreate", "onDeploy", "onRemove"},
	"ZarfComponentImport":            {"name", "path", "url"},
	"ZarfComponentOnlyCluster":       {"architecture", "distros"},
	"ZarfComponentOnlyTarget":        {"localOS", "cluster", "flavor"},
	"ZarfDataInjection":              {"source", "target", "compress"},
	"ZarfFile":                       {"source", "shasum", "target", "executable", "symlinks", "extractPath"},
	"ZarfManifest":                   {"name", "namespace", "files", "kustomizeAllowAnyDirectory", "kustomizations", "noWait"},
	"ZarfMetadata":                   {"name", "description", "version", "url", "image", "uncompressed", "architecture", "yolo", "authors", "documentation", "source", "vendor", "aggregateChecksum", "annotations", "allowNamespaceOverride"},
	"ZarfPackage":                    {"apiVersion", "kind", "metadata", "build", "components", "constants", "variables"},
}
