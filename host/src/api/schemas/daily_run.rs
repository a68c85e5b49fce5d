//! The daily-run API's wire shapes: the `dailyRun` flag, the executions
//! and the answers of starting one.

use serde::Serialize;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        RefOr, Schema,
        schema::{ObjectBuilder, Type},
    },
};

use super::MessageBody;

/// The flag as GET answers it and POST echoes it.
#[derive(Serialize, ToSchema)]
pub struct DailyRunFlag {
    #[serde(rename = "dailyRun")]
    pub daily_run: bool,
}

/// The flag a POST may send: a boolean, `true`/`false`/`yes`/`no` in any
/// case, or 1 or 0.
#[derive(ToSchema)]
#[serde(untagged)]
pub enum FlagValue {
    Flag(bool),
    Word(FlagWord),
    Digit(FlagDigit),
}

#[derive(ToSchema)]
#[schema(pattern = "^\\s*([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]|[Yy][Ee][Ss]|[Nn][Oo])\\s*$")]
pub struct FlagWord(String);

/// The flag as a number: 1 or 0.
pub struct FlagDigit;

impl PartialSchema for FlagDigit {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .enum_values(Some([0, 1]))
            .into()
    }
}

impl ToSchema for FlagDigit {}

/// POST /dailyRun/dailyRun_enabled.
#[derive(ToSchema)]
pub struct DailyRunFlagRequest {
    #[serde(rename = "dailyRun")]
    daily_run: FlagValue,
}

/// A run's status.
#[derive(ToSchema)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum ExecutionStatus {
    RUNNING,
    SUCCEEDED,
    FAILED,
    TIMED_OUT,
    ABORTED,
}

/// The spec's Execution object; dates are ISO 8601 with microseconds and
/// `+00:00`.
#[derive(ToSchema)]
pub struct Execution {
    name: String,
    status: ExecutionStatus,
    #[serde(rename = "startDate")]
    start_date: String,
    #[serde(rename = "stopDate")]
    stop_date: Option<String>,
    /// Why a run ended other than SUCCEEDED.
    error: Option<String>,
    cause: Option<String>,
}

/// mode=list.
#[derive(ToSchema)]
pub struct ExecutionList {
    executions: Vec<Execution>,
}

/// The three shapes of execution_status: a list (mode=list), one execution
/// or null (latest; the response schema adds the null), one execution or
/// `{message}` (last_successful).
#[derive(ToSchema)]
#[serde(untagged)]
pub enum ExecutionStatusBody {
    List(ExecutionList),
    One(Execution),
    NoSuccess(MessageBody),
}

/// 200 of POST /dailyRun/start_execution.
#[derive(ToSchema)]
pub struct ExecutionStarted {
    message: String,
    started: bool,
    #[serde(rename = "executionArn")]
    execution_arn: String,
    #[serde(rename = "startDate")]
    start_date: String,
    #[serde(rename = "executionName")]
    execution_name: String,
    #[serde(rename = "stateMachineArn")]
    state_machine_arn: String,
}

/// The run already going.
#[derive(ToSchema)]
pub struct RunningExecution {
    name: String,
    status: ExecutionStatus,
    #[serde(rename = "startDate")]
    start_date: String,
}

/// 409 of POST /dailyRun/start_execution.
#[derive(ToSchema)]
pub struct ExecutionNotStarted {
    message: String,
    started: bool,
    #[serde(rename = "executionName")]
    execution_name: Option<String>,
    #[serde(rename = "runningExecution")]
    running_execution: RunningExecution,
    #[serde(rename = "stateMachineArn")]
    state_machine_arn: String,
}
