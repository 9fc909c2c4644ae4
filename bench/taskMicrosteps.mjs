/**
 * Counts what the task actor does per task, independent of the machine's load: its microsteps, snapshots and events
 * (XState's inspection of each root task actor), printed as one JSON line on stderr when the process exits. Preload
 * it into a benchmark run, e.g. the `core` bench's sequential phase:
 *
 *   NODE_OPTIONS="--import ./bench/taskMicrosteps.mjs" node scripts/bench.mjs core 100 0 0 0
 *
 * (the bench's own process prints a line with no tasks; the bundle it runs prints the figures).
 */
import { Actor } from 'xstate';

const start = Actor.prototype.start;
const counted = new WeakSet();
let tasks = 0;
const counts = { microsteps: 0, snapshots: 0, events: 0 };
const kinds = {
  '@xstate.microstep': 'microsteps',
  '@xstate.snapshot': 'snapshots',
  '@xstate.event': 'events',
};

Actor.prototype.start = function startCounted() {
  // A task actor is a root actor of the machine whose id is `task` (taskMachine.ts).
  if (this._parent === undefined && this.logic?.id === 'task' && !counted.has(this)) {
    counted.add(this);
    tasks++;
    this.system.inspect((event) => {
      const kind = kinds[event.type];
      if (event.actorRef === this && kind !== undefined) counts[kind]++;
    });
  }
  return start.call(this);
};

process.on('exit', () => {
  const per = (n) => (tasks === 0 ? null : Number((n / tasks).toFixed(2)));
  console.error(
    JSON.stringify({
      tasks,
      microstepsPerTask: per(counts.microsteps),
      snapshotsPerTask: per(counts.snapshots),
      eventsPerTask: per(counts.events),
    }),
  );
});
