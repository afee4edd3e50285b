//! The admission webhook that holds every StatefulSet the reconciler writes to its app's
//! `spec.image` (issue #34). A ValidatingAdmissionPolicy cannot read the app at a cost that
//! scales (manifests/admission-policy.yaml says what it cost), so this is a webhook, run as
//! a Deployment of its own under a ServiceAccount of its own that may read apps and set this
//! webhook's CA, and nothing else: a compromised reconciler can change neither it nor its
//! certificate, and may not change an app's spec (the policy `hellostateful-reconciler-apps`),
//! so the image it is held to is the tenant's.
//!
//! Deciding is pure (`verdict`); serving (`router`) reads the app afresh for each request,
//! and refuses when it cannot (the webhook fails closed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use hellostateful_api::HelloStateful;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PodSpec;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::kept;

/// The webhook configuration whose CA this process sets (manifests/admission-webhook.yaml).
pub const WEBHOOK_CONFIGURATION: &str = "hellostateful-admission";

/// Whether the reconciler may write `statefulset` (over `old`, on an update) for `app`, the
/// app of its name as the API server holds it now (None: there is none). `Err` says why not,
/// in words the reconciler's log and the API server's refusal show.
pub fn verdict(
    statefulset: &StatefulSet,
    old: Option<&StatefulSet>,
    app: Option<&HelloStateful>,
) -> Result<(), String> {
    let template = |sts: &StatefulSet| sts.spec.as_ref().map(|spec| spec.template.clone());
    // Scaling, stopping an app being deleted (whose app may be gone): what runs, and for
    // whom, is unchanged.
    if old.is_some_and(|old| {
        template(old) == template(statefulset)
            && old.metadata.owner_references == statefulset.metadata.owner_references
    }) {
        return Ok(());
    }
    let name = statefulset.name_any();
    let namespace = statefulset.namespace().unwrap_or_default();
    // No app, or another uid: one answer, naming nothing of the app. Anyone in the cluster
    // can reach this endpoint with a review of their own making, so an answer must not
    // tell whether another namespace holds an app, nor its uid or image, to one who does
    // not know the app's uid already.
    let controller = kept::controller_uid(&statefulset.metadata);
    let Some(app) = app.filter(|app| controller.is_some() && app.uid().as_deref() == controller)
    else {
        return Err(format!(
            "StatefulSet {name} is not controlled by HelloStateful {name} of namespace \
             {namespace} (its controller is {}): a StatefulSet of the reconciler's is its \
             app's, by uid",
            controller.unwrap_or("none")
        ));
    };
    let image = app.spec.image();
    let pod = statefulset
        .spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref());
    let others: Vec<String> = pod
        .map(images)
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, used)| used.as_deref() != Some(image))
        .map(|(container, used)| {
            format!("{container} runs {}", used.as_deref().unwrap_or("no image"))
        })
        .collect();
    if others.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "a StatefulSet of the reconciler's runs only its app's spec.image ({image}); {}",
            others.join(", ")
        ))
    }
}

/// Every container of `pod` (init and ephemeral ones too) with its image.
fn images(pod: &PodSpec) -> Vec<(String, Option<String>)> {
    let init = pod.init_containers.iter().flatten();
    let ephemeral = pod
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.image.clone()));
    pod.containers
        .iter()
        .chain(init)
        .map(|c| (c.name.clone(), c.image.clone()))
        .chain(ephemeral)
        .collect()
}

/// What the endpoints share.
pub struct Webhook {
    pub client: Client,
    /// Set once the API server was given this process's CA: until then it cannot call it.
    pub ready: AtomicBool,
}

/// The webhook's endpoints: POST /statefulsets (AdmissionReview v1), GET /healthz and /readyz.
pub fn router(webhook: Arc<Webhook>) -> Router {
    Router::new()
        .route("/statefulsets", post(statefulsets))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(webhook)
}

async fn readyz(State(webhook): State<Arc<Webhook>>) -> (StatusCode, &'static str) {
    if webhook.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the API server has not been given the CA yet",
        )
    }
}

async fn statefulsets(
    State(webhook): State<Arc<Webhook>>,
    axum::Json(review): axum::Json<AdmissionReview<StatefulSet>>,
) -> axum::Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<StatefulSet> = match review.try_into() {
        Ok(request) => request,
        Err(error) => return axum::Json(AdmissionResponse::invalid(error).into_review()),
    };
    let response = AdmissionResponse::from(&request);
    let Some(statefulset) = &request.object else {
        return axum::Json(response.into_review());
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    let apps = Api::<HelloStateful>::namespaced(webhook.client.clone(), &namespace);
    // Fresh, never cached: the app as the API server holds it now.
    let answer = match apps.get_opt(&statefulset.name_any()).await {
        Ok(app) => match verdict(statefulset, request.old_object.as_ref(), app.as_ref()) {
            Ok(()) => response,
            Err(why) => {
                tracing::info!(namespace, name = statefulset.name_any(), why, "refused");
                response.deny(why)
            }
        },
        Err(error) => response.deny(format!(
            "reading HelloStateful {} in namespace {namespace}: {error}",
            statefulset.name_any()
        )),
    };
    axum::Json(answer.into_review())
}

/// A certificate for the webhook's Service names, signed by a CA made for it alone: the
/// CA's certificate (PEM, for the webhook configuration's caBundle), then the serving
/// certificate and its key (DER, for TLS). Made at every start; nothing is stored.
pub struct Certificates {
    pub ca_pem: String,
    pub certificate_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

pub fn certificates(dns_names: Vec<String>) -> Result<Certificates, rcgen::Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    ca.distinguished_name
        .push(DnType::CommonName, "hellostateful admission webhook CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(dns_names)?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "hellostateful admission webhook");
    let certificate = serving.signed_by(&key, &ca)?;
    Ok(Certificates {
        ca_pem: ca.pem(),
        certificate_der: certificate.der().to_vec(),
        key_der: key.serialize_der(),
    })
}

/// Gives the API server `ca_pem` as the CA of every webhook of the configuration.
pub async fn publish_ca(client: Client, ca_pem: &str) -> Result<(), kube::Error> {
    let api = Api::<ValidatingWebhookConfiguration>::all(client);
    let configuration = api.get(WEBHOOK_CONFIGURATION).await?;
    let bundle = serde_json::to_value(ByteString(ca_pem.as_bytes().to_vec()))
        .map_err(kube::Error::SerdeError)?;
    // Strategic: webhooks merge by name (a merge patch would replace the whole list).
    let webhooks: Vec<_> = configuration
        .webhooks
        .iter()
        .flatten()
        .map(|webhook| json!({"name": webhook.name, "clientConfig": {"caBundle": bundle}}))
        .collect();
    api.patch(
        WEBHOOK_CONFIGURATION,
        &PatchParams::default(),
        &Patch::Strategic(json!({"webhooks": webhooks})),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn statefulset(image: &str, owner_uid: &str) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "hello", "namespace": "ns1", "ownerReferences": [{
                "apiVersion": "hello-stateful.example.com/v1alpha1", "kind": "HelloStateful",
                "name": "hello", "uid": owner_uid, "controller": true}]},
            "spec": {"selector": {}, "serviceName": "hello", "replicas": 1, "template": {
                "spec": {"containers": [{"name": "app", "image": image}]}}}
        }))
        .expect("a StatefulSet")
    }

    #[test]
    fn only_the_apps_own_image_under_its_own_uid_is_let_through() {
        let app = fixtures::app(json!({"image": "busybox:1.36"}), json!({}));
        let own = statefulset("busybox:1.36", "uid-1");
        assert_eq!(verdict(&own, None, Some(&app)), Ok(()));

        let other = statefulset("attacker/root:1", "uid-1");
        let why = verdict(&other, None, Some(&app)).expect_err("another image");
        assert!(
            why.contains("busybox:1.36") && why.contains("app runs attacker/root:1"),
            "{why}"
        );

        let mut init = own.clone();
        if let Some(pod) = init.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
            pod.init_containers = Some(vec![
                serde_json::from_value(json!({"name": "setup", "image": "attacker/root:1"}))
                    .expect("a container"),
            ]);
        }
        let why = verdict(&init, None, Some(&app)).expect_err("an init container");
        assert!(why.contains("setup runs attacker/root:1"), "{why}");

        // An app of the same name made since (another uid) is not the one it was made for.
        let earlier = statefulset("busybox:1.36", "uid-earlier");
        let why = verdict(&earlier, None, Some(&app)).expect_err("another app");
        assert!(why.contains("uid-earlier"), "{why}");

        // No app answers as another uid does: nothing tells whether the app exists.
        let why = verdict(&own, None, None).expect_err("no app");
        assert!(
            why.starts_with("StatefulSet hello is not controlled by HelloStateful hello of namespace ns1 (its controller is uid-1)"),
            "{why}"
        );
        let other_uid = verdict(&earlier, None, Some(&app)).expect_err("another app");
        assert_eq!(
            why.replace("uid-1", "uid-earlier"),
            other_uid,
            "the same answer"
        );
        assert!(!other_uid.contains("busybox"), "{other_uid}");
    }

    #[test]
    fn an_update_that_leaves_what_runs_alone_is_let_through_even_without_its_app() {
        let old = statefulset("attacker/root:1", "uid-1");
        let mut scaled = old.clone();
        if let Some(spec) = scaled.spec.as_mut() {
            spec.replicas = Some(0);
        }
        assert_eq!(verdict(&scaled, Some(&old), None), Ok(()));

        let changed = statefulset("attacker/other:2", "uid-1");
        assert!(verdict(&changed, Some(&old), None).is_err());

        // Handed to another owner: checked, though what runs is unchanged.
        let app = fixtures::app(json!({"image": "attacker/root:1"}), json!({}));
        let handed = statefulset("attacker/root:1", "uid-other");
        let why = verdict(&handed, Some(&old), Some(&app)).expect_err("another owner");
        assert!(why.contains("uid-other"), "{why}");
    }

    #[test]
    fn the_serving_certificate_is_signed_by_a_ca_of_its_own() {
        let made = certificates(vec![
            "hellostateful-admission.hellostateful-system.svc".into(),
        ])
        .expect("certificates");
        assert!(made.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!made.certificate_der.is_empty() && !made.key_der.is_empty());
        let again = certificates(vec!["x.svc".into()]).expect("certificates");
        assert_ne!(made.ca_pem, again.ca_pem, "a CA of its own at every start");
    }
}
