//! A stored job's start and its caller's handle on it: `submit` (checked and
//! planned with the caller's access, then run at once when a slot is free,
//! else stored QUEUED for a worker), `get` (the caller's own job only) and
//! `cancel`.

use std::{sync::Arc, time::Duration};

use datafusion::arrow::datatypes::SchemaRef;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument as _;

use super::{
    QueryJobs,
    jobs::{Planned, Started},
    owns,
    runs_here::CountedRun,
};
use crate::{
    auth::LakeCaller,
    engine::{layout::StringColumns, statement::StatementType, table_writer::delete_paths},
    lake,
    observability::jobs,
    query::{QueryError, execute::result_schema, result_parquet::parquet_holds},
    store::queries::{NewQuery, QueryJob, QueryState, ResultFirst},
};

/// What a caller asks of a submission beyond its statement (POST /query's
/// `Prefer`); the wire front ends ask nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubmitPreferences {
    /// `Prefer: reuse=N`: the oldest earlier result the caller accepts;
    /// `None` leaves it to the org's setting.
    pub reuse_max_age_s: Option<u64>,
    /// `Prefer: result-format=arrow|parquet`: the file the query writes
    /// while it runs (honoured while this service keeps typed results).
    pub result_first: ResultFirst,
}

/// What POST /query made.
#[derive(Debug)]
pub struct Submitted {
    pub id: String,
    /// The job in its final state, when it ended before `submit` returned
    /// (run before it was stored, or answered with a reused result).
    pub ended: Option<QueryJob>,
    /// The columns the result will have, as the engine types them.
    pub schema: SchemaRef,
    /// How its result is (or was) written: what the caller preferred when
    /// it was honoured, else CSV first; a reused result's way.
    pub result_first: ResultFirst,
}

impl QueryJobs {
    /// POST /query: checks and plans `sql`, then runs it at once when a slot
    /// is free, else queues it. Returns the id.
    ///
    /// A read may instead be answered with an earlier result (`reuse.rs`):
    /// `preferences.reuse_max_age_s` is the caller's `Prefer: reuse=N`, else
    /// the org's setting applies. Its result is written as
    /// `preferences.result_first` says when this service keeps typed
    /// results, else as CSV.
    ///
    /// `wait` is the caller's `Prefer: wait` (what is left of it): a query
    /// that ends within `RUN_BEFORE_STORING` of it is stored once, at its end
    /// (`waiting.rs`), and comes back in `Submitted::ended`.
    pub async fn submit(
        self: &Arc<Self>,
        caller: &LakeCaller,
        sql: &str,
        database: Option<&str>,
        preferences: SubmitPreferences,
        wait: Option<Duration>,
    ) -> Result<Submitted, QueryError> {
        let database = database
            .map(str::to_string)
            .unwrap_or_else(|| Self::default_database(caller));
        let (planned, statement_type) = self
            .plan_for(caller, &database, sql, StringColumns::Views)
            .await?;
        let schema = result_schema(&planned.prepared);
        let id = uuid::Uuid::new_v4().to_string();
        let mut query = Self::new_query(caller, &id, sql, database, statement_type);
        // Typed first only where typed results are kept, and Parquet first
        // only for columns Parquet holds (else the result is written CSV
        // first, and its Parquet request answers as for any such result).
        let holds = match preferences.result_first {
            ResultFirst::Parquet => parquet_holds(&schema),
            ResultFirst::Csv | ResultFirst::Arrow => true,
        };
        if self.limits.typed_results && holds {
            query.result_first = preferences.result_first;
        }
        if let Some(max_age_s) = self.reuse_max_age_s(&query, preferences.reuse_max_age_s)
            && let Some(reused) = self.reuse(&query, &planned, max_age_s).await?
        {
            return Ok(Submitted {
                id,
                result_first: reused.query.result_first,
                ended: Some(reused),
                schema,
            });
        }
        // Run now when a slot is free and the org and caller are under their
        // caps (fair sharing); else queue, where the fairest job goes next.
        // A draining replica runs nothing new: the job waits for another.
        let admitted = match self.slots.clone().try_acquire_owned() {
            Ok(slot) if !self.drain.is_draining() => self
                .runs_here
                .try_enter(&query.org, &query.owner_sub, self.limits.caps())
                .map(|counted| (slot, counted)),
            _ => None,
        };
        let Some((slot, counted)) = admitted else {
            self.store.insert_query(&query, self.now()).await?;
            jobs::query_submitted(&id, &query.statement_type, true);
            self.wake.notify_one();
            return Ok(Submitted {
                id,
                ended: None,
                schema,
                result_first: query.result_first,
            });
        };
        let result_first = query.result_first;
        self.run_admitted(query, planned, (slot, counted), wait)
            .await
            .map(|ended| Submitted {
                id,
                ended,
                schema,
                result_first,
            })
    }

    /// Runs the admitted `query` now, its plan started while the job is
    /// stored: its result file and any lake files stay unlisted until the
    /// job's end is recorded, which needs the stored job and this replica's
    /// lease. The job in its final state when it ended within `wait`.
    async fn run_admitted(
        self: &Arc<Self>,
        query: NewQuery,
        planned: Planned,
        (slot, counted): (OwnedSemaphorePermit, CountedRun),
        wait: Option<Duration>,
    ) -> Result<Option<QueryJob>, QueryError> {
        let id = &query.id;
        let result_path = Self::result_path_of(&query, 1);
        let mut started = self.start_engine(planned, &query, &result_path);
        if let Some(wait) = wait
            && let Some(ended) = self
                .end_before_storing(&query, &mut started, &result_path, wait)
                .await?
        {
            return Ok(Some(ended));
        }
        let now = self.now();
        let job = match self
            .store
            .insert_running_query(&query, &self.holder, now, self.lease.until())
            .await
        {
            Ok(job) => job,
            Err(e) => {
                drop(started);
                delete_paths(self.lake.object_store().as_ref(), &[result_path]).await;
                return Err(e.into());
            }
        };
        jobs::query_submitted(id, &query.statement_type, false);
        self.run_in_background(job, started, counted, slot);
        Ok(None)
    }

    /// Runs `job`, already started, on its own task holding `slot` until it
    /// ends; in the caller's span, so the run's log lines carry its request id.
    pub(super) fn run_in_background(
        self: &Arc<Self>,
        job: QueryJob,
        started: Started,
        counted: CountedRun,
        slot: OwnedSemaphorePermit,
    ) {
        let service = self.clone();
        tokio::spawn(
            async move {
                service.run(job, Some(started), counted).await;
                drop(slot);
            }
            .in_current_span(),
        );
    }

    /// The job of `caller`'s statement `sql`, with their access.
    pub(super) fn new_query(
        caller: &LakeCaller,
        id: &str,
        sql: &str,
        database: String,
        statement_type: StatementType,
    ) -> NewQuery {
        NewQuery {
            id: id.to_string(),
            org: caller.org.clone(),
            zone: caller.zone.clone(),
            owner_sub: caller.sub.clone(),
            access_fingerprint: caller.grant.fingerprint(),
            sql: sql.to_string(),
            database,
            statement_type: statement_type.as_str().to_string(),
            access_json: serde_json::to_string(&caller.grant).expect("grant serialises"),
            result_first: ResultFirst::Csv,
        }
    }

    pub(super) fn result_path_of(query: &NewQuery, attempt: i64) -> String {
        lake::result_path(
            &query.org,
            query.zone.as_deref(),
            &query.owner_sub,
            &query.access_fingerprint,
            &query.id,
            attempt,
        )
    }

    /// The caller's own query on this API, or NotFound (also for another
    /// user's query: its existence is not revealed).
    pub async fn get(&self, caller: &LakeCaller, id: &str) -> Result<QueryJob, QueryError> {
        let not_found = || QueryError::NotFound(id.to_string());
        let job = self.store.query_job(id).await?.ok_or_else(not_found)?;
        if !owns(caller, &job) {
            return Err(not_found());
        }
        Ok(job)
    }

    /// DELETE /query: cancels a QUEUED or RUNNING query and stops its work; a
    /// final query stays as it is. True when this call cancelled it.
    pub async fn cancel(&self, caller: &LakeCaller, id: &str) -> Result<bool, QueryError> {
        let job = self.get(caller, id).await?;
        if job.state.is_final() {
            return Ok(false);
        }
        let cancelled = self.store.cancel_query(id, self.now()).await?;
        if cancelled {
            self.ended.announce(id);
            jobs::query_ended(id, QueryState::Cancelled, &job.query.statement_type, None);
            let token = self
                .running
                .lock()
                .expect("running map lock")
                .get(id)
                .cloned();
            if let Some(token) = token {
                token.cancel();
            }
        }
        Ok(cancelled)
    }
}
