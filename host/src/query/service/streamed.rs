//! Streamed statements (Flight SQL reads, Postgres reads): the rows go to
//! the client while the query runs, and no result is kept.
//!
//! - `plan_streamed` (Flight's `GetFlightInfo`) checks and plans a statement
//!   for its caller, as a submission does, and names the query id a read's
//!   run will have. Nothing is stored yet. Statements that are not reads are
//!   submitted as stored jobs instead (`submit`).
//! - `run_streamed` (`DoGet`) plans the statement again for whoever asks, so
//!   the ticket (id and SQL) grants nothing.
//! - `stream_if_read` (a Postgres statement) plans it once and, when it is a
//!   read, streams it under a new id at once; other statements are the
//!   caller's to submit as stored jobs.
//! - Both then wait for a slot under the fair-sharing caps, store the job
//!   RUNNING on this replica's lease with its `Delivery`, and run it through
//!   the worker's `run` (time limit, cancellation, lease, drain) while the
//!   client reads. Batches wait in a channel of `BATCHES_IN_FLIGHT`, so a
//!   slow client holds the scan back and memory stays bounded. After the
//!   last batch, the job's recorded end says whether the rows were all of
//!   them.
//! - `cancel_streamed` cancels the run, or stores the job CANCELLED when it
//!   has not started, so asking for its rows later finds it cancelled.
//!
//! An id runs once: asking again finds the job and answers that its rows
//! were not kept (`results::not_kept`), as REST's `/result` and `/csv` do
//! for it.

use std::sync::Arc;

use datafusion::arrow::{array::RecordBatch, datatypes::SchemaRef};
use futures::{StreamExt as _, stream::BoxStream};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::{
    QueryJobs, jobs::Planned, owns, results::not_kept, runs_here::CountedRun, worker::POLL_INTERVAL,
};
use crate::{
    auth::LakeCaller,
    engine::{
        layout::{StringColumns, without_view_types},
        statement::StatementType,
    },
    observability::jobs,
    query::{
        QueryError,
        execute::{ClientReading, result_schema, stream_rows},
        prepare::Prepared,
    },
    store::queries::{Delivery, NewQuery, QueryJob, QueryState},
};

/// Batches between the engine and a client that reads slower than it scans.
const BATCHES_IN_FLIGHT: usize = 4;

/// Why a streamed statement does not start on a stopping replica.
const STOPPING: &str = "The server is stopping and starts no new statements; run the statement \
     again (another server will run it).";

/// A statement checked and planned for streaming.
pub struct StreamPlan {
    /// The columns its rows will have, as the engine types them.
    pub schema: SchemaRef,
    /// The id its streamed run will have; none for a statement that is not
    /// a read (it runs as a stored job).
    pub streamed_id: Option<String>,
}

/// What asking for a streamed statement's rows found.
pub enum StreamStart {
    Rows(StreamedRows),
    /// Its client cancelled it before asking.
    Cancelled,
}

/// A streamed run's rows, as the engine sends them.
pub struct StreamedRows {
    /// The query's id.
    pub id: String,
    /// The columns, view types made plain (as each batch has them).
    pub schema: SchemaRef,
    /// The batches; an error last when the query did not end SUCCEEDED.
    pub batches: BoxStream<'static, Result<RecordBatch, StreamStop>>,
    /// What the client did with them: the front end counts the rows it
    /// took and says when it stops reading on purpose before the last one
    /// (the job then ends SUCCEEDED, not FAILED as when a client goes away
    /// mid-result).
    pub reading: ClientReading,
}

/// How a streamed run ended short of its last row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamStop {
    Cancelled,
    /// FAILED (time limit, memory, engine error), with the job's reason.
    Failed(String),
}

impl QueryJobs {
    /// Checks and plans `sql` for `caller` as `submit` does (refusals
    /// included), storing nothing: its columns and, for a read, the id its
    /// streamed run will have.
    pub async fn plan_streamed(
        &self,
        caller: &LakeCaller,
        sql: &str,
    ) -> Result<StreamPlan, QueryError> {
        let (planned, _) = self.plan_to_stream(caller, sql).await?;
        let streamed_id = matches!(planned.prepared, Prepared::Read { .. })
            .then(|| uuid::Uuid::new_v4().to_string());
        Ok(StreamPlan {
            schema: result_schema(&planned.prepared),
            streamed_id,
        })
    }

    /// Runs the read `sql` for `caller` as query `id` (from `plan_streamed`),
    /// its rows streamed to its Flight SQL client as they come.
    pub async fn run_streamed(
        self: &Arc<Self>,
        caller: &LakeCaller,
        id: &str,
        sql: &str,
    ) -> Result<StreamStart, QueryError> {
        let id = issued_id(id)?;
        if let Some(job) = self.store.query_job(&id).await? {
            return Self::asked_again(caller, &job);
        }
        let planned = self.plan_to_stream(caller, sql).await?;
        self.stream(caller, id, sql, planned, Delivery::FlightSql)
            .await
    }

    /// Plans `sql` for `caller` and, when it is a read, runs it under a new
    /// id with its rows streamed to `delivery`'s client as they come; `None`
    /// for any other statement, which the caller submits as a stored job.
    pub async fn stream_if_read(
        self: &Arc<Self>,
        caller: &LakeCaller,
        sql: &str,
        delivery: Delivery,
    ) -> Result<Option<StreamedRows>, QueryError> {
        let planned = self.plan_to_stream(caller, sql).await?;
        if !matches!(planned.0.prepared, Prepared::Read { .. }) {
            return Ok(None);
        }
        let id = uuid::Uuid::new_v4().to_string();
        match self
            .stream(caller, id.clone(), sql, planned, delivery)
            .await?
        {
            StreamStart::Rows(rows) => Ok(Some(rows)),
            // Nobody else knows a new id, so nobody can have cancelled it.
            StreamStart::Cancelled => Err(QueryError::unexpected(format!(
                "the new streamed query {id} was found cancelled"
            ))),
        }
    }

    /// Runs the read `planned` (`sql`, planned for `caller`) as query `id`
    /// once a slot and a place under the caps are free, its rows streamed.
    async fn stream(
        self: &Arc<Self>,
        caller: &LakeCaller,
        id: String,
        sql: &str,
        (mut planned, statement_type): (Planned, StatementType),
        delivery: Delivery,
    ) -> Result<StreamStart, QueryError> {
        let query = Self::new_query(
            caller,
            &id,
            sql,
            Self::default_database(caller),
            statement_type,
        );
        let (slot, counted) = match self.try_admit(&query) {
            Some(admitted) => admitted,
            None => {
                // No plan is held while waiting, and none older than the
                // wait runs: files a commit retired meanwhile may be gone.
                drop(planned);
                let admitted = self.admit_streamed(&query).await?;
                planned = self.plan_to_stream(caller, sql).await?.0;
                admitted
            }
        };
        let Planned {
            context,
            prepared: Prepared::Read { plan, .. },
            ..
        } = planned
        else {
            return Err(QueryError::Invalid(
                "Only a read streams its rows; run other statements as updates.".into(),
            ));
        };
        let schema = Arc::new(without_view_types(&plan.schema()));
        let stored = self
            .store
            .insert_streamed_query(
                &query,
                delivery,
                &self.holder,
                self.now(),
                self.lease.until(),
            )
            .await;
        let job = match stored {
            Ok(job) => job,
            // A cancel (or another ask) stored it first.
            Err(e) => match self.store.query_job(&id).await? {
                Some(job) => return Self::asked_again(caller, &job),
                None => return Err(e.into()),
            },
        };
        jobs::query_submitted(&id, &query.statement_type, false);
        let (rows, mut received) = mpsc::channel(BATCHES_IN_FLIGHT);
        let reading = ClientReading::default();
        let started = {
            let reading = reading.clone();
            self.start_run(async move { stream_rows(&context, plan, rows, reading).await })
        };
        self.run_in_background(job, started, counted, slot);
        let end = {
            let (service, caller, id) = (self.clone(), caller.clone(), id.clone());
            async move { service.end_of_stream(&caller, &id).await }
        };
        let batches = futures::stream::poll_fn(move |cx| received.poll_recv(cx))
            .map(Ok)
            .chain(futures::stream::once(end).filter_map(|stop| async move { stop.map(Err) }))
            .boxed();
        Ok(StreamStart::Rows(StreamedRows {
            id,
            schema,
            batches,
            reading,
        }))
    }

    /// `sql` checked and planned for `caller` in its default database, with
    /// plain string columns, as streamed rows carry them.
    async fn plan_to_stream(
        &self,
        caller: &LakeCaller,
        sql: &str,
    ) -> Result<(Planned, StatementType), QueryError> {
        self.plan_for(
            caller,
            &Self::default_database(caller),
            sql,
            StringColumns::Plain,
        )
        .await
    }

    /// Cancels `caller`'s streamed statement `id` (`sql`): its job when it
    /// runs, else a job stored CANCELLED. True when it was cancelled now.
    pub async fn cancel_streamed(
        &self,
        caller: &LakeCaller,
        id: &str,
        sql: &str,
    ) -> Result<bool, QueryError> {
        let id = issued_id(id)?;
        if self.store.query_job(&id).await?.is_some() {
            return self.cancel(caller, &id).await;
        }
        let database = Self::default_database(caller);
        let (_, statement_type) = self
            .plan_for(caller, &database, sql, StringColumns::Views)
            .await?;
        let query = Self::new_query(caller, &id, sql, database, statement_type);
        let stored = self
            .store
            .insert_cancelled_query(&query, Delivery::FlightSql, self.now())
            .await;
        match stored {
            Ok(_) => {
                jobs::query_submitted(&id, &query.statement_type, true);
                jobs::query_ended(&id, QueryState::Cancelled, &query.statement_type, None);
                Ok(true)
            }
            // Its rows were asked for meanwhile: cancel that run.
            Err(e) => match self.store.query_job(&id).await? {
                Some(_) => self.cancel(caller, &id).await,
                None => Err(e.into()),
            },
        }
    }

    /// What asking again for the rows of `job` answers.
    fn asked_again(caller: &LakeCaller, job: &QueryJob) -> Result<StreamStart, QueryError> {
        if !owns(caller, job) {
            return Err(QueryError::NotFound(job.query.id.clone()));
        }
        match (job.delivery, job.state) {
            (Delivery::Stored, _) => Err(QueryError::Invalid(
                "The ticket names a query that was not a Flight SQL read.".into(),
            )),
            (_, QueryState::Cancelled) => Ok(StreamStart::Cancelled),
            _ => Err(not_kept(&job.query.id, job.delivery)),
        }
    }

    /// A slot and a place under the fair-sharing caps for `query` when both
    /// are free now (and the replica is not draining).
    fn try_admit(&self, query: &NewQuery) -> Option<(OwnedSemaphorePermit, CountedRun)> {
        if self.drain.is_draining() {
            return None;
        }
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        let caps = self.limits.caps();
        let counted = self
            .runs_here
            .try_enter(&query.org, &query.owner_sub, caps)?;
        Some((slot, counted))
    }

    /// A slot and a place under the fair-sharing caps for `query`, waited
    /// for as long as the client waits (a stored job would wait QUEUED).
    async fn admit_streamed(
        &self,
        query: &NewQuery,
    ) -> Result<(OwnedSemaphorePermit, CountedRun), QueryError> {
        loop {
            if self.drain.is_draining() {
                return Err(QueryError::Failed(STOPPING.into()));
            }
            let slot = tokio::select! {
                slot = self.slots.clone().acquire_owned() => slot
                    .map_err(|_| QueryError::unexpected("the query slots are closed"))?,
                () = self.drain.began() => continue,
            };
            let caps = self.limits.caps();
            // Enabled before the caps are checked: a run that ends in
            // between still wakes this one.
            let freed = self.runs_here.freed();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(counted) = self.runs_here.try_enter(&query.org, &query.owner_sub, caps) {
                return Ok((slot, counted));
            }
            drop(slot);
            tokio::select! {
                () = freed => {}
                () = tokio::time::sleep(POLL_INTERVAL) => {}
            }
        }
    }

    /// How the streamed query `id` ended once its last batch was sent: none
    /// when it SUCCEEDED (the client has every row).
    async fn end_of_stream(&self, caller: &LakeCaller, id: &str) -> Option<StreamStop> {
        let job = match self.wait_for_final(caller, id).await {
            Ok(job) => job,
            Err(e) => return Some(StreamStop::Failed(e.reason())),
        };
        match job.state {
            QueryState::Succeeded => None,
            QueryState::Cancelled => Some(StreamStop::Cancelled),
            _ => Some(StreamStop::Failed(
                job.state_change_reason
                    .unwrap_or_else(|| format!("query {id} failed")),
            )),
        }
    }
}

/// `id` when it is one `plan_streamed` could have issued (a UUID in its
/// one spelling), so a made-up ticket names no other query.
fn issued_id(id: &str) -> Result<String, QueryError> {
    uuid::Uuid::parse_str(id)
        .ok()
        .map(|uuid| uuid.to_string())
        .filter(|spelled| spelled == id)
        .ok_or_else(|| QueryError::Invalid("The ticket does not name a lakehost query.".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_in_their_one_spelling_are_issued() {
        let id = "8c4f6d0e-3b1a-4f2e-9d7c-5a6b8e9f0a1b";
        assert_eq!(issued_id(id).unwrap(), id);
        assert!(issued_id(&id.to_uppercase()).is_err());
        assert!(issued_id(&id.replace('-', "")).is_err());
        assert!(issued_id("../../etc").is_err());
        assert!(issued_id("").is_err());
    }
}
