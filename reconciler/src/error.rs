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
    /// A bug reached by this app's pass: caught, so that it stops this app alone.
    #[error("the reconcile pass panicked (a bug; please report it): {0}")]
    Panicked(String),
    /// A Job the pass must make has its name held by one the app does not control (a
    /// look-alike): the API server answers 409 until that Job is deleted.
    #[error(
        "job {name:?} is not this app's (no controller reference to it) and holds the name of \
         the app's own Job: delete it (kubectl delete job {name} -n {namespace}) and the app's \
         Job is made in its place"
    )]
    NameTaken { name: String, namespace: String },
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
            Error::Panicked(_) => "panicked".to_string(),
            Error::NameTaken { .. } => "name_taken".to_string(),
        }
    }

    /// The error of the pass itself, out of the finalizer's wrapping.
    fn innermost(&self) -> &Error {
        match self {
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(error)
                | kube::runtime::finalizer::Error::CleanupFailed(error) => error.innermost(),
                _ => self,
            },
            _ => self,
        }
    }

    /// The API server's answer, when it refused a request (directly or within the pass).
    fn api_status(&self) -> Option<&kube::core::Status> {
        match self.innermost() {
            Error::Kube(kube::Error::Api(status)) => Some(status),
            _ => None,
        }
    }

    /// A wait for something outside the pass (pods stopping, a Job running), not a failure.
    pub fn is_waiting(&self) -> bool {
        matches!(self.innermost(), Error::Waiting(_))
    }

    /// The API server refused a write, in words worth telling the user: invalid (400, 422),
    /// forbidden (403: RBAC, a quota, an admission policy, the leader fence) or an internal
    /// error (500: how a failing admission webhook answers). Conflicts, missing objects,
    /// throttling and an unavailable server are retried without a word. A Job's name held
    /// by a look-alike is a refusal too: the user must delete it.
    pub fn is_refusal(&self) -> bool {
        matches!(self.innermost(), Error::NameTaken { .. })
            || self
                .api_status()
                .is_some_and(|status| matches!(status.code, 400 | 403 | 422 | 500))
    }

    /// Whether a deletion's cleanup failed (it keeps no status record of its own).
    pub fn is_cleanup(&self) -> bool {
        matches!(self, Error::Finalizer(inner)
            if matches!(inner.as_ref(), kube::runtime::finalizer::Error::CleanupFailed(_)))
    }

    /// An error that retrying cannot fix: the API server refused what the spec asks for.
    pub fn is_permanent(&self) -> bool {
        self.api_status()
            .is_some_and(|status| status.code == 422 || status.code == 400)
    }

    /// What status and events say: the API server's own message for its refusals (kube's
    /// Display of them appends a Debug dump of the whole Status), otherwise the error.
    pub fn user_message(&self) -> String {
        match self.api_status() {
            Some(status) if !status.message.is_empty() => status.message.clone(),
            Some(status) => format!("{} ({})", status.reason, status.code),
            None => self.innermost().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::finalizer;

    #[test]
    fn a_refusal_is_told_in_the_api_servers_words_without_a_debug_dump() {
        let message =
            "CronJob.batch \"backup-x\" is invalid: spec.schedule: Invalid value: \"61 * * * *\"";
        let status = kube::core::Status::failure(message, "Invalid").with_code(422);
        let error = Error::Finalizer(Box::new(finalizer::Error::ApplyFailed(Error::Kube(
            kube::Error::Api(Box::new(status)),
        ))));
        assert!(error.is_permanent());
        assert_eq!(error.user_message(), message);
        assert!(
            error.to_string().contains("Status {"),
            "kube's Display has the dump"
        );
        assert_eq!(
            Error::Waiting("pods".into()).user_message(),
            "still waiting: pods"
        );
    }
}
