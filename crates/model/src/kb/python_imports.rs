//! Python import names and the distributions that provide them, for installing what a port's
//! import sweep finds missing.

use super::KnowledgeBase;
use serde::Deserialize;

/// An import name that is not its distribution's name (`skimage` is `scikit-image`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonImportNameRow {
    pub import: String,
    /// A PEP 508 requirement: the name, and a bound where a release dropped the module
    /// (`setuptools<82` for `pkg_resources`).
    pub distribution: String,
    pub source: String,
}

impl KnowledgeBase {
    /// The distribution to install for a module that failed with `No module named NAME`: the
    /// listed one for `NAME` or a package above it (`google.protobuf.x` → `protobuf`); None for
    /// a name not listed.
    pub fn distribution_for_import(&self, module: &str) -> Option<&str> {
        let mut name = module;
        loop {
            if let Some(row) = self.python_import_names.iter().find(|r| r.import == name) {
                return Some(&row.distribution);
            }
            name = name.rsplit_once('.')?.0;
        }
    }
}
