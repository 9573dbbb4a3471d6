//! The one HTTP client archsmith builds: PyPI's Simple API and range reads ([`crate::pypi`]),
//! Debian's archive ([`crate::downloads::debian_archive`]). The platform verifier trusts the
//! system's certificate store, as pip configured with it does; statuses are the caller's to judge.

use std::time::Duration;

/// An agent whose whole exchange (connect, headers, body) may take `timeout`.
pub fn agent(timeout: Duration) -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}
