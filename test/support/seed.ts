/**
 * A seeded random source for tests that pick moments at random: the seed is printed when the test file starts, and
 * `TROUPE_TEST_SEED=<seed>` (or `chosen`) replays a failing run's choices.
 */
export function seededRandom(label: string, chosen?: number): { seed: number; random: () => number } {
  const given = chosen ?? Number(process.env.TROUPE_TEST_SEED);
  const seed = Number.isInteger(given) && given > 0 ? given : Math.floor(Math.random() * 2 ** 31) + 1;
  console.info(`${label}: random seed ${seed} (replay with TROUPE_TEST_SEED=${seed})`);
  // mulberry32: small, fast, and good enough to spread test timings.
  let state = seed >>> 0;
  return {
    seed,
    random() {
      state = (state + 0x6d2b79f5) >>> 0;
      let t = state;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
    },
  };
}
