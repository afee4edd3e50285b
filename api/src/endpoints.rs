//! The object store endpoints the cluster admin allows (the settings' `objectStoreEndpoints`,
//! the reconciler's `--object-store-endpoints`): one rule for the reconciler, which refuses a
//! spec naming another, and for the plugin, which runs no pod that would send an app's keys
//! to one.

/// Parses the admin's comma-separated endpoints; empty: any endpoint is allowed.
pub fn parse(setting: &str) -> Vec<String> {
    setting
        .split(',')
        .map(|endpoint| without_trailing_slashes(endpoint.trim()))
        .filter(|endpoint| !endpoint.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether `allowed` (as [`parse`] makes it; empty: any) lets a spec name `endpoint`: the
/// same text once trailing '/' are dropped from both. No prefix, no case folding, no default
/// port: a look-alike host, another scheme or an explicit port is another endpoint, refused
/// rather than guessed at.
pub fn allows(allowed: &[String], endpoint: &str) -> bool {
    let endpoint = without_trailing_slashes(endpoint);
    allowed.is_empty()
        || allowed
            .iter()
            .any(|entry| without_trailing_slashes(entry) == endpoint)
}

/// Whether `text` has the shape a spec's endpoint must have (the CRD's rule):
/// `http(s)://host[:port]`, maybe with one trailing '/', no path, user or query.
pub fn is_endpoint(text: &str) -> bool {
    let Some(rest) = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"))
    else {
        return false;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = match rest.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    };
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && port.is_none_or(|port| {
            (1..=5).contains(&port.len()) && port.chars().all(|c| c.is_ascii_digit())
        })
}

fn without_trailing_slashes(endpoint: &str) -> &str {
    endpoint.trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_allowed_only_when_it_is_one_the_admin_listed() {
        let allowed = parse("https://s3.example.com, http://minio.storage:9000/");
        for (endpoint, expected) in [
            ("https://s3.example.com", true),
            ("https://s3.example.com/", true),
            ("https://s3.example.com//", true),
            ("http://minio.storage:9000", true),
            ("http://minio.storage:9000/", true),
            // Look-alikes: a longer host, a prefix, a subdomain, a user part.
            ("https://s3.example.com.evil.io", false),
            ("https://s3.example.co", false),
            ("https://evil.s3.example.com", false),
            ("https://s3.example.com@evil.io", false),
            ("https://s3.example.com/evil", false),
            // Another scheme or port is another endpoint, even a default port.
            ("http://s3.example.com", false),
            ("https://s3.example.com:443", false),
            ("https://s3.example.com:8443", false),
            ("http://minio.storage", false),
            ("http://minio.storage:90000", false),
            ("https://minio.storage:9000", false),
            // No case folding: refused rather than guessed equal.
            ("https://S3.example.com", false),
            ("HTTPS://s3.example.com", false),
            ("", false),
            ("/", false),
        ] {
            assert_eq!(allows(&allowed, endpoint), expected, "{endpoint:?}");
        }
    }

    #[test]
    fn an_empty_setting_allows_any_endpoint() {
        for setting in ["", " ", " , ", "/"] {
            let allowed = parse(setting);
            assert!(allowed.is_empty(), "{setting:?}: {allowed:?}");
            assert!(allows(&allowed, "https://anywhere.example"), "{setting:?}");
        }
    }

    #[test]
    fn the_admins_list_is_trimmed_of_spaces_and_trailing_slashes() {
        assert_eq!(
            parse(" https://s3.example.com/ ,,https://other:9000//"),
            ["https://s3.example.com", "https://other:9000"]
        );
    }

    #[test]
    fn an_endpoint_is_http_or_https_with_a_host_and_maybe_a_port() {
        for good in [
            "https://s3.example.com",
            "https://s3.example.com/",
            "http://minio:9000",
            "https://10.0.0.1:443/",
        ] {
            assert!(is_endpoint(good), "{good:?}");
        }
        for bad in [
            "",
            "s3.example.com",
            "ftp://s3.example.com",
            "file:///etc",
            "https://",
            "https://:9000",
            "https://s3.example.com//",
            "https://s3.example.com/path",
            "https://user@s3.example.com",
            "https://s3.example.com:",
            "https://s3.example.com:123456",
            "https://s3.example.com:https",
            "https://s3.example.com?x=1",
            "https://s3.example.com, https://other",
        ] {
            assert!(!is_endpoint(bad), "{bad:?}");
        }
    }
}
