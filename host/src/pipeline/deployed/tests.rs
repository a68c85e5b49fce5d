//! The deployments over a real SQLite store and a local lake, with the
//! built-in components' bytes as an org's own.

use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::{
    clock::SystemClock,
    pipeline::{PipelineKind, builtin, manifest::ComponentSource as ComponentSourceOf},
};

struct Setup {
    _dir: tempfile::TempDir,
    deployments: Deployments,
}

async fn setup(adjust: impl FnOnce(&mut PipelineConfig)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), None).await.unwrap();
    let lake = Lake::local(&dir.path().join("lake")).unwrap();
    let mut config = PipelineConfig {
        dir: dir.path().join("pipelines"),
        ..PipelineConfig::default()
    };
    adjust(&mut config);
    let deployments = Deployments::new(
        store,
        lake,
        PipelineEngine::shared().unwrap(),
        config,
        Arc::new(SystemClock),
    );
    Setup {
        _dir: dir,
        deployments,
    }
}

fn bytes_of(name: &str) -> Bytes {
    Bytes::from_static(builtin::component(name).unwrap().1)
}

fn org() -> PipelineScope {
    scope("demo", None)
}

/// The default load manifest with `guard` (component `component`) after
/// `validate_parquet`.
fn load_manifest(component: &str, grants: &str) -> String {
    format!(
        "{}\n[[steps]]\nname = \"guard\"\ncomponent = \"{component}\"\ngrants = {grants}\n\
         [steps.config]\nforbidden = [\"email\"]\n",
        builtin::manifest(PipelineKind::Load)
    )
}

#[tokio::test]
async fn a_component_is_stored_once_by_its_digest_with_its_world() {
    let setup = setup(|_| {}).await;
    let d = &setup.deployments;
    let guard = bytes_of("reject_columns");
    let digest = components::digest_of(&guard);
    let Stored::Created(info) = d
        .put_component(&org(), &digest, guard.clone(), "admin")
        .await
        .unwrap()
    else {
        panic!("stored twice")
    };
    assert_eq!(
        (info.kind, info.bytes),
        (PipelineKind::Load, guard.len() as u64)
    );
    assert!(matches!(
        d.put_component(&org(), &digest, guard.clone(), "admin")
            .await
            .unwrap(),
        Stored::Existing(_)
    ));
    // Another org (or zone) has not stored it.
    assert!(matches!(
        d.component(&scope("other", None), &digest).await,
        Err(DeployError::ComponentNotFound(_))
    ));
    assert!(matches!(
        d.component(&scope("demo", Some("lab")), &digest).await,
        Err(DeployError::ComponentNotFound(_))
    ));
    let daily = bytes_of("sql_transform");
    let Stored::Created(info) = d
        .put_component(&org(), &components::digest_of(&daily), daily, "admin")
        .await
        .unwrap()
    else {
        panic!("stored twice")
    };
    assert_eq!(info.kind, PipelineKind::Daily);
}

#[tokio::test]
async fn a_bad_digest_size_or_component_is_refused_and_nothing_is_stored() {
    let setup = setup(|config| config.max_component_bytes = 1 << 20).await;
    let d = &setup.deployments;
    let guard = bytes_of("reject_columns");
    let digest = components::digest_of(&guard);
    let refused = |r: Result<Stored, DeployError>| r.unwrap_err();
    assert!(matches!(
        refused(
            d.put_component(&org(), "sha256:ABC", guard.clone(), "a")
                .await
        ),
        DeployError::BadDigest(_)
    ));
    let other = components::digest_of(b"other");
    assert!(matches!(
        refused(d.put_component(&org(), &other, guard.clone(), "a").await),
        DeployError::DigestMismatch { .. }
    ));
    let big = Bytes::from(vec![0u8; (1 << 20) + 1]);
    assert!(matches!(
        refused(d.put_component(&org(), &components::digest_of(&big), big, "a").await),
        DeployError::TooLarge { cap } if cap == 1 << 20
    ));
    let junk = Bytes::from_static(b"\0asm not really");
    let error = refused(
        d.put_component(&org(), &components::digest_of(&junk), junk, "a")
            .await,
    );
    assert!(matches!(error, DeployError::NotUsable(_)), "{error}");
    assert!(matches!(
        d.component(&org(), &digest).await,
        Err(DeployError::ComponentNotFound(_))
    ));
}

#[tokio::test]
async fn a_version_is_checked_numbered_activated_rolled_back_and_run() {
    let setup = setup(|_| {}).await;
    let d = &setup.deployments;
    let guard = bytes_of("reject_columns");
    let digest = components::digest_of(&guard);
    let grants = "[\"staged-files\", \"log\"]";
    // Not stored yet.
    let missing = d
        .create_version(
            &org(),
            PipelineKind::Load,
            &load_manifest(&digest, grants),
            "a",
        )
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("is not stored here"),
        "{missing}"
    );
    d.put_component(&org(), &digest, guard, "admin")
        .await
        .unwrap();
    let refusals = [
        (load_manifest("guard.wasm", grants), "steps[5].component"),
        (
            load_manifest(&digest, grants)
                .replace("[steps.config]", "time_limit_ms = 3600001\n[steps.config]"),
            "steps[5].time_limit_ms",
        ),
        (
            load_manifest(&digest, grants).replace("\"lake-append\"", "\"log\""),
            "steps",
        ),
        (
            "version = 1\n[[steps]]\nname = \"x\"\ncomponent = \"builtin:sql_transform\"\n".into(),
            "steps[0].component",
        ),
        ("version = 1\nsteps = [\n".into(), "<toml>"),
    ];
    for (text, key) in refusals {
        match d
            .create_version(&org(), PipelineKind::Load, &text, "a")
            .await
        {
            Err(DeployError::Manifest(e)) => assert_eq!(e.key, key, "{e}"),
            other => panic!("{key}: {other:?}"),
        }
    }
    // The daily pipeline does not take a load step.
    let daily = format!(
        "version = 1\n[[steps]]\nname = \"guard\"\ncomponent = \"{digest}\"\ngrants = [\"log\"]\n"
    );
    let wrong_world = d
        .create_version(&org(), PipelineKind::Daily, &daily, "a")
        .await
        .unwrap_err();
    assert!(
        wrong_world.to_string().contains("world step"),
        "{wrong_world}"
    );

    let first = d
        .create_version(
            &org(),
            PipelineKind::Load,
            builtin::manifest(PipelineKind::Load),
            "a",
        )
        .await
        .unwrap();
    let second = d
        .create_version(
            &org(),
            PipelineKind::Load,
            &load_manifest(&digest, grants),
            "b",
        )
        .await
        .unwrap();
    assert_eq!((first.version, second.version), (1, 2));
    assert_eq!(second.steps.len(), 6);
    assert!(d.version(&org(), PipelineKind::Load, 3).await.is_err());

    let judged = d
        .manifest_for(PipelineKind::Load, "demo", None)
        .await
        .unwrap();
    assert_eq!(judged.by, JudgedBy::BuiltIn);
    d.activate(&org(), PipelineKind::Load, Some(2), "b")
        .await
        .unwrap();
    let judged = d
        .manifest_for(PipelineKind::Load, "demo", Some("lab"))
        .await
        .unwrap();
    assert_eq!(
        judged.by,
        JudgedBy::Version {
            version: 2,
            digest: second.digest.clone()
        }
    );
    assert_eq!(
        judged.manifest.steps[5].component,
        ComponentSourceOf::Stored(digest.clone())
    );
    // Another org runs its own.
    let other = d
        .manifest_for(PipelineKind::Load, "other", None)
        .await
        .unwrap();
    assert_eq!(other.by, JudgedBy::BuiltIn);
    // Rollback, then the files again.
    d.activate(&org(), PipelineKind::Load, Some(1), "b")
        .await
        .unwrap();
    let judged = d
        .manifest_for(PipelineKind::Load, "demo", None)
        .await
        .unwrap();
    assert!(matches!(judged.by, JudgedBy::Version { version: 1, .. }));
    d.activate(&org(), PipelineKind::Load, None, "b")
        .await
        .unwrap();
    assert_eq!(
        d.manifest_for(PipelineKind::Load, "demo", None)
            .await
            .unwrap()
            .by,
        JudgedBy::BuiltIn
    );
    let history = d.history(&org(), PipelineKind::Load).await.unwrap();
    assert_eq!(
        history.iter().map(|a| a.version).collect::<Vec<_>>(),
        [None, Some(1), Some(2)]
    );
    assert!(matches!(
        d.activate(&org(), PipelineKind::Load, Some(9), "b").await,
        Err(DeployError::VersionNotFound(9))
    ));
}

#[tokio::test]
async fn a_grant_the_operator_keeps_from_orgs_own_components_is_refused_then_and_later() {
    let setup = setup(|config| config.org_grants.retain(|g| g != "log")).await;
    let d = &setup.deployments;
    // The built-ins are the host's: their grants are not bounded.
    let text = builtin::manifest(PipelineKind::Load);
    d.create_version(&org(), PipelineKind::Load, text, "a")
        .await
        .unwrap();
    let guard = bytes_of("reject_columns");
    let digest = components::digest_of(&guard);
    d.put_component(&org(), &digest, guard, "a").await.unwrap();
    let text = load_manifest(&digest, "[\"staged-files\", \"log\"]");
    match d
        .create_version(&org(), PipelineKind::Load, &text, "a")
        .await
    {
        Err(DeployError::Manifest(e)) => {
            assert_eq!(e.key, "steps[5].grants");
            assert!(e.problem.contains("`log` may not be granted"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A version made before the bound was tightened is refused from then
    // on: to activate, and to run.
    let looser = Deployments::new(
        d.store.clone(),
        d.lake.clone(),
        d.engine.clone(),
        PipelineConfig::default(),
        Arc::new(SystemClock),
    );
    let made = looser
        .create_version(&org(), PipelineKind::Load, &text, "a")
        .await
        .unwrap();
    looser
        .activate(&org(), PipelineKind::Load, Some(made.version), "a")
        .await
        .unwrap();
    assert!(matches!(
        d.activate(&org(), PipelineKind::Load, Some(made.version), "a")
            .await,
        Err(DeployError::Manifest(_))
    ));
    assert!(matches!(
        d.manifest_for(PipelineKind::Load, "demo", None).await,
        Err(DeployError::Manifest(_))
    ));
}

#[tokio::test]
async fn a_shadow_runs_a_version_without_its_writing_steps_for_its_scope_only() {
    let setup = setup(|_| {}).await;
    let d = &setup.deployments;
    assert!(d.shadow_for("demo", None).await.unwrap().is_none());
    assert!(matches!(
        d.set_shadow(&org(), Some(1), "a").await,
        Err(DeployError::VersionNotFound(1))
    ));
    let version = d
        .create_version(
            &org(),
            PipelineKind::Load,
            builtin::manifest(PipelineKind::Load),
            "a",
        )
        .await
        .unwrap();
    d.set_shadow(&org(), Some(version.version), "a")
        .await
        .unwrap();
    // The org's shadow runs beside its zones' commits too, another org's not.
    let plan = d.shadow_for("demo", Some("lab")).await.unwrap().unwrap();
    assert_eq!((plan.version, plan.scope.clone()), (version.version, org()));
    assert!(d.shadow_for("other", None).await.unwrap().is_none());
    let runnable = plan.runnable();
    let names: Vec<&str> = runnable.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "validate_parquet",
            "enforce_service_clients",
            "verify_checksums",
            "match_schema"
        ]
    );
    let judged = plan.judgements(&[]);
    assert_eq!(judged.len(), 5);
    assert_eq!(judged[4].outcome, "not run");
    let report = d.shadow_report(&org()).await.unwrap();
    assert_eq!(report.tally.map(|t| t.loads), Some(0));
    d.set_shadow(&org(), None, "a").await.unwrap();
    assert!(d.shadow_for("demo", None).await.unwrap().is_none());
    assert!(d.shadow_report(&org()).await.unwrap().tally.is_none());
}

#[tokio::test]
async fn a_component_of_no_hosted_world_is_refused_naming_both() {
    let setup = setup(|_| {}).await;
    // The empty component: a component, but a step of neither world.
    let empty = Bytes::from_static(b"\0asm\x0d\x00\x01\x00");
    let digest = components::digest_of(&empty);
    let error = setup
        .deployments
        .put_component(&org(), &digest, empty, "a")
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(
            error,
            DeployError::NotUsable(ComponentError::NoWorld { .. })
        ),
        "{text}"
    );
    assert!(
        text.contains("world step") && text.contains("world daily-step"),
        "{text}"
    );
}
