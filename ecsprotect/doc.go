// Package ecsprotect keeps an ECS task protected from scale-in while its
// worker has jobs in flight, through the ECS agent's task scale-in
// protection endpoint ($ECS_AGENT_URI/task-protection/v1/state).
//
// Without it, a service scaling in (or a deployment) stops a task whatever
// it runs: the worker's graceful stop gives running handlers its shutdown
// timeout (25s by default, within ECS's stop timeout), then cuts them
// short, and their messages come back to run again. A job longer than that
// is cut at every scale-in that picks its task, each cut spending one of
// its receives: with an autoscaler that scales in often, a healthy long job
// can reach the redrive policy's maxReceiveCount and be dead-lettered.
//
// A [Protector] learns which jobs run from its Middleware, and looks at
// them every Config.Interval: while a job has run for Config.After (10s by
// default), it keeps the task protected, renewing the protection before
// half of Config.Expires has passed; once no such job runs, it removes the
// protection, so that the task may be stopped between long jobs. Jobs
// shorter than After do not protect the task: they finish within the
// worker's graceful stop, and a task that always runs some would
// otherwise never be scaled in. At its start it removes a protection an
// earlier process of the task may have left; when Run returns (its
// context ended: the worker is stopping), the protection it set. The
// agent's refusals are logged once, never fatal: the worker runs on
// unprotected, and asks again less and less often (a refused removal, not
// at all).
//
// Protection holds off deployments as it does scale-in: a deployment
// replaces a protected task once its protection ends. A task protected
// for Config.MaxProtected (2 hours by default) without a pause, whose long
// jobs follow one another under a backlog or whose handler never returns,
// is unprotected until it has had no long job, so that deployments (which
// CloudFormation gives 3 hours) go on.
//
// The task role needs ecs:UpdateTaskProtection on the cluster's tasks,
// and the task must belong to an ECS service (a standalone task's
// protection is refused, TASK_NOT_VALID).
package ecsprotect
