//! What a decision may need that no cache holds: a finished Job's termination message (the
//! mover's summary), a running Job's pods and the Job controller's refusal to make one, how
//! many of the app's pods are left, the phase of a claim the reconciler does not own, and
//! whether a Job the cache lacks is really gone.
//! (Pods and events are not watched: a reconciler of many apps would hold them all.) A
//! decision that lacks one
//! returns `Decision::Read`; the controller reads it, adds it to `Reads`, and runs the
//! decision again from the start, on a fresh copy of the record.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use crate::jobs;

/// A read a decision asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Read {
    /// The termination message of this Job's pod.
    Message(String),
    /// The pods of this Job.
    JobPods(String),
    /// The message of the Job controller's newest FailedCreate event for this Job.
    Refusal(String),
    /// How many pods of the app exist (running or not), and how many replicas its
    /// StatefulSet asks for, as the API server holds it now.
    AppPods,
    /// The phase of this claim of the app's namespace, if it exists.
    ClaimPhase(String),
    /// Whether this Job, the app's own, exists as the API server holds it now: the cache may
    /// not have seen a Job the previous pass made.
    JobExists(String),
}

/// What a decision returns.
#[derive(Debug)]
pub enum Decision<P> {
    Done(P),
    Read(Read),
}

/// The app's pods and StatefulSet, as the API server holds them now (`Read::AppPods`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AppPods {
    /// The pods of the app that exist, running or terminating.
    pub pods: usize,
    /// The replicas its StatefulSet asks for (0 when there is none).
    pub asked: i32,
    /// Whether the StatefulSet controller has seen that spec (its `observedGeneration`):
    /// until it has, it may still make pods for an earlier one, as when pods are deleted
    /// by someone else.
    pub seen: bool,
}

impl AppPods {
    /// What stopping the app waits for; None once it is stopped (no pod left, and a
    /// StatefulSet that makes none, as its controller has seen): a mover may take the
    /// volumes.
    pub fn waiting_for(&self) -> Option<String> {
        Some(match (self.pods, self.asked, self.seen) {
            (0, 0, true) => return None,
            (0, 0, false) => "waiting for the StatefulSet controller to see that its \
                StatefulSet asks for 0 replicas"
                .to_string(),
            (0, asked, _) => {
                format!("waiting for its StatefulSet to ask for 0 replicas (it asks for {asked})")
            }
            (pods, _, _) => format!("waiting for {pods} pod(s) to exit"),
        })
    }
}

/// A read not made yet, as an error, so that decisions can use `?`.
#[derive(Debug)]
pub struct Unread(pub Read);

/// The reads made so far in one pass.
#[derive(Debug, Default)]
pub struct Reads {
    messages: HashMap<String, Option<String>>,
    job_pods: HashMap<String, Vec<Pod>>,
    refusals: HashMap<String, Option<String>>,
    app_pods: Option<AppPods>,
    claim_phases: HashMap<String, Option<String>>,
    jobs_exist: HashMap<String, bool>,
}

impl Reads {
    /// The termination message of `job`'s pod (None: it left none).
    pub fn message(&self, job: &str) -> Result<Option<&str>, Unread> {
        self.messages
            .get(job)
            .map(Option::as_deref)
            .ok_or_else(|| Unread(Read::Message(job.to_string())))
    }

    /// The mover's account of a failed Job, else the Job's own `reason`.
    pub fn failure(&self, job: &str, reason: String) -> Result<String, Unread> {
        Ok(match self.message(job)? {
            Some(message) if !message.is_empty() => jobs::failure_summary(message),
            _ => reason,
        })
    }

    pub fn job_pods(&self, job: &str) -> Result<&[Pod], Unread> {
        self.job_pods
            .get(job)
            .map(Vec::as_slice)
            .ok_or_else(|| Unread(Read::JobPods(job.to_string())))
    }

    pub fn refusal(&self, job: &str) -> Result<Option<&str>, Unread> {
        self.refusals
            .get(job)
            .map(Option::as_deref)
            .ok_or_else(|| Unread(Read::Refusal(job.to_string())))
    }

    /// The app's pods and StatefulSet, as the API server holds them now.
    pub fn app_pods(&self) -> Result<AppPods, Unread> {
        self.app_pods.ok_or(Unread(Read::AppPods))
    }

    /// The phase of claim `name` (None: it does not exist).
    pub fn claim_phase(&self, name: &str) -> Result<Option<&str>, Unread> {
        self.claim_phases
            .get(name)
            .map(Option::as_deref)
            .ok_or_else(|| Unread(Read::ClaimPhase(name.to_string())))
    }

    /// Whether the app's Job `name` exists.
    pub fn job_exists(&self, name: &str) -> Result<bool, Unread> {
        self.jobs_exist
            .get(name)
            .copied()
            .ok_or_else(|| Unread(Read::JobExists(name.to_string())))
    }

    pub fn add_message(&mut self, job: String, message: Option<String>) {
        self.messages.insert(job, message);
    }

    pub fn add_job_pods(&mut self, job: String, pods: Vec<Pod>) {
        self.job_pods.insert(job, pods);
    }

    pub fn add_refusal(&mut self, job: String, refusal: Option<String>) {
        self.refusals.insert(job, refusal);
    }

    pub fn add_app_pods(&mut self, app_pods: AppPods) {
        self.app_pods = Some(app_pods);
    }

    pub fn add_claim_phase(&mut self, name: String, phase: Option<String>) {
        self.claim_phases.insert(name, phase);
    }

    pub fn add_job_exists(&mut self, name: String, exists: bool) {
        self.jobs_exist.insert(name, exists);
    }
}

/// Turns a decision's `Unread` into `Decision::Read`.
pub fn decided<P>(result: Result<P, Unread>) -> Decision<P> {
    match result {
        Ok(plan) => Decision::Done(plan),
        Err(Unread(read)) => Decision::Read(read),
    }
}
