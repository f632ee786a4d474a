// Package cron parses recurring-job schedules (5-field cron expressions,
// the @hourly family and "@every D"), computes their fire times in a time
// zone, plans which slots a pass fires under a misfire policy, and runs
// the firer that the meta leader uses to enqueue each slot exactly once
// (docs/jobs.md, "Recurring jobs (cron)").
//
// A slot is one fire time, named by its Unix milliseconds. The firer
// sends a slot's message with the dedup key SlotKey and then records the
// slot in the meta log (meta.Store.RecordCronFire): a new meta leader
// starts after the recorded slot and resends the first unrecorded one
// with the same key, which the shard deduplicates.
package cron
