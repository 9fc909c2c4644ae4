import { MAX_TOLD_KEYS } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { MAX_UNREAD_TOLD, MAX_UNREAD_TOLD_BYTES, TaskSteering } from '../../src/task/taskSteering.ts';

const AT = '2026-01-01T00:00:00.000Z';

describe("a task's steering", () => {
  it('holds once, lets go once, and counts how long it held', () => {
    const steering = new TaskSteering();
    const heard: boolean[] = [];
    steering.listen((held) => heard.push(held));
    expect(steering.pause(1_000, 'ann', 'why')).toBe(true);
    expect(steering.pause(2_000)).toBe(false);
    expect(heard).toEqual([true]);
    expect(steering.resume(5_000)).toEqual({ since: 1_000, by: 'ann', reason: 'why', heldMs: 4_000 });
    expect(steering.resume(6_000)).toBeUndefined();
    // Listeners hear the letting go only once the resume is recorded.
    expect(heard).toEqual([true]);
    steering.letGo();
    expect(heard).toEqual([true, false]);
    expect(steering.pausedMs).toBe(4_000);
    expect(steering.fields()).toEqual({ pausedMs: 4_000 });
  });

  it('tells each hold to the listeners there were when it came; one stopped with unlisten hears no more', () => {
    const steering = new TaskSteering();
    const heard: string[] = [];
    const second = (held: boolean) => heard.push(`second ${held}`);
    const late = (held: boolean) => heard.push(`late ${held}`);
    steering.listen((held) => {
      heard.push(`first ${held}`);
      // Added while a change is told, it hears the next one; taken off meanwhile, it still hears this one.
      if (held) steering.listen(late);
      steering.unlisten(second);
    });
    steering.listen(second);
    steering.pause(1_000);
    steering.undoPause();
    expect(heard).toEqual(['first true', 'second true', 'first false', 'late false']);
  });

  it('tells an object listener through its holdChanged, until unlisten', () => {
    const steering = new TaskSteering();
    const heard: boolean[] = [];
    const watcher = { holdChanged: (held: boolean) => heard.push(held) };
    steering.listen(watcher);
    steering.pause(1_000);
    steering.undoPause();
    steering.unlisten(watcher);
    steering.pause(2_000);
    expect(heard).toEqual([true, false]);
  });

  it('keeps a message told while a step is at work (beginWork) for that step, until the step reads it or ends (endWork)', async () => {
    const steering = new TaskSteering();
    steering.beginWork('t1.plan.1');
    steering.beginWork('t1.build.1');
    const message = steering.tell('use tabs', AT);
    steering.read([message.id], 't1.plan.1');
    // Read by one step, owed to the other: still there for it, and for no step that comes later.
    expect(steering.toldFor('t1.build.1').map((m) => m.id)).toEqual([message.id]);
    expect(steering.toldFor('t1.test.1')).toEqual([]);
    expect(steering.fields().toldOwed).toEqual([{ messageId: message.id, steps: ['t1.build.1'] }]);
    steering.endWork('t1.build.1');
    await new Promise((resolve) => setImmediate(resolve));
    expect(steering.told).toEqual([]);
    expect(steering.fields()).toEqual({ toldCount: 1 });
  });

  it('gives each message the next id, keeps it until read, and goes on from a record', () => {
    const steering = new TaskSteering();
    expect(steering.tell('one', AT, 'ann')).toEqual({ id: 'm-1', text: 'one', by: 'ann', at: AT });
    steering.tell('two', AT);
    steering.read(['m-1']);
    expect(steering.told.map((m) => m.id)).toEqual(['m-2']);
    steering.pause(Date.parse(AT));
    const restored = new TaskSteering(steering.fields());
    expect(restored.paused?.since).toBe(Date.parse(AT));
    expect(restored.told.map((m) => m.text)).toEqual(['two']);
    // Ids go on from the count, not from what is unread: m-1 is never given again.
    expect(restored.tell('three', AT).id).toBe('m-3');
  });

  it("keeps the newest tells' keys with their ids, from a record too, and forgets a key whose message is taken back", () => {
    const steering = new TaskSteering();
    for (let n = 1; n <= MAX_TOLD_KEYS + 1; n += 1) steering.tell(`message ${n}`, AT, undefined, `key-${n}`);
    steering.read(
      steering.told.map((m) => m.id),
      'task-1.plan.1',
    );
    // Past the bound the oldest key is dropped: a tell again with it would be a new message.
    expect(steering.toldWith('key-1')).toBeUndefined();
    expect(steering.toldWith('key-2')).toBe('m-2');
    const keys = steering.fields().toldKeys;
    expect(keys).toHaveLength(MAX_TOLD_KEYS);
    expect(keys?.at(-1)).toEqual({ key: `key-${MAX_TOLD_KEYS + 1}`, messageId: `m-${MAX_TOLD_KEYS + 1}` });
    const restored = new TaskSteering(steering.fields());
    expect(restored.toldWith(`key-${MAX_TOLD_KEYS + 1}`)).toBe(`m-${MAX_TOLD_KEYS + 1}`);
    // A message whose record could not be written is taken back, its key with it: the retry is a tell of its own.
    const lost = restored.tell('lost', AT, undefined, 'key-lost');
    restored.read([lost.id]);
    expect(restored.toldWith('key-lost')).toBeUndefined();
  });

  it('takes back a pause that could not be recorded, letting held steps go', () => {
    const steering = new TaskSteering();
    const heard: boolean[] = [];
    steering.listen((held) => heard.push(held));
    steering.pause(1_000);
    steering.undoPause();
    expect(steering.paused).toBeUndefined();
    expect(steering.pausedMs).toBe(0);
    expect(heard).toEqual([true, false]);
  });

  it('holds steps until a resume is recorded, and takes back one that could not be, paused as before', () => {
    const steering = new TaskSteering();
    const heard: boolean[] = [];
    steering.listen((held) => heard.push(held));
    steering.pause(1_000, 'ann');
    steering.resume(3_000);
    expect(steering.paused).toBeUndefined();
    expect(steering.held).toBe(true);
    steering.undoResume();
    expect(steering.paused).toEqual({ since: 1_000, by: 'ann' });
    expect(steering.pausedMs).toBe(0);
    expect(steering.held).toBe(true);
    steering.resume(4_000);
    steering.letGo();
    expect(steering.held).toBe(false);
    expect(steering.pausedMs).toBe(3_000);
    expect(heard).toEqual([true, false]);
  });

  it('keeps a message one step read for the other steps at work when it was told, and for them only', async () => {
    const steering = new TaskSteering();
    const left = steering.atWork('s.left.1');
    const right = steering.atWork('s.right.1');
    steering.tell('one', AT);
    steering.read(['m-1'], 's.left.1');
    expect(steering.toldFor('s.right.1').map((m) => m.id)).toEqual(['m-1']);
    expect(steering.toldFor('s.later.1')).toEqual([]);
    left();
    // One part of a step's call replaced by another in the same transition: the step is still at work.
    right();
    const held = steering.atWork('s.right.1');
    await new Promise((resolve) => setImmediate(resolve));
    expect(steering.told.map((m) => m.id)).toEqual(['m-1']);
    steering.read(['m-1'], 's.right.1');
    expect(steering.told).toEqual([]);
    held();
    // A step that ends without reading what it was told to no longer holds it.
    const alone = steering.atWork('s.alone.1');
    steering.tell('two', AT);
    steering.read(['m-2'], 's.other.1');
    expect(steering.told.map((m) => m.id)).toEqual(['m-2']);
    alone();
    // Settled in the turn after its end, once the transitions it set off (a retry's wait, say) have begun.
    await new Promise((resolve) => setImmediate(resolve));
    expect(steering.told).toEqual([]);
  });

  it('refuses a message past the most it keeps unread, by count or by size', () => {
    const steering = new TaskSteering();
    expect(steering.refusal('x'.repeat(MAX_UNREAD_TOLD_BYTES + 1))).toMatch(/over the 256 KiB it keeps/);
    for (let i = 0; i < MAX_UNREAD_TOLD; i++) steering.tell('hi', AT);
    expect(steering.refusal('one more')).toMatch(/100 told messages no step has read yet/);
    steering.read(['m-1']);
    expect(steering.refusal('one more')).toBeUndefined();
  });
});
