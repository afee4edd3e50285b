//! Errors of the reconciler library.

use thiserror::Error;

/// Why a reconcile pass failed.
#[derive(Debug, Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("building a child object: {0}")]
    Build(#[source] serde_json::Error),
    #[error("the object lacks {0}")]
    MissingField(&'static str),
    #[error("still waiting: {0}")]
    Waiting(String),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// A short label for metrics.
    pub fn metric_label(&self) -> String {
        match self {
            Error::Kube(kube::Error::Api(status)) => format!("api_{}", status.code),
            Error::Kube(_) => "kube".to_string(),
            Error::Build(_) => "build".to_string(),
            Error::MissingField(_) => "missing_field".to_string(),
            Error::Waiting(_) => "waiting".to_string(),
            Error::Finalizer(_) => "finalizer".to_string(),
        }
    }

    /// An error that retrying cannot fix: the API server refused what the spec asks for.
    pub fn is_permanent(&self) -> bool {
        let api = match self {
            Error::Kube(kube::Error::Api(status)) => Some(status),
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(Error::Kube(kube::Error::Api(s))) => {
                    Some(s)
                }
                _ => None,
            },
            _ => None,
        };
        api.is_some_and(|status| status.code == 422 || status.code == 400)
    }
}
