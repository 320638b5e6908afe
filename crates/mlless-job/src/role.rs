//! The names of a job's functions, as invocations, checkpoints and the run record name them.

/// The role name of the supervisor.
pub const SUPERVISOR_ROLE: &str = "supervisor";

/// The role name of worker `id`.
pub fn worker_role(id: u32) -> String {
    format!("worker-{id}")
}
