//! The names of a job's functions, as invocations, checkpoints and the run record name them.

/// The role name of the supervisor.
pub const SUPERVISOR_ROLE: &str = "supervisor";

/// The role name of worker `id`.
pub fn worker_role(id: u32) -> String {
    format!("worker-{id}")
}

/// The roles of a job of `workers` workers: the supervisor, then the workers in order.
pub fn roles(workers: u32) -> Vec<String> {
    let mut roles = vec![SUPERVISOR_ROLE.to_string()];
    roles.extend((0..workers).map(worker_role));
    roles
}
