-- The step a load's commit is in, written by the replica holding it as each
-- step begins ('' between the claim and the first step). NULL while nobody
-- runs the commit: before its first claim and after a draining replica
-- handed it back. A claim that finds it set knows the previous holder died
-- during that step (its lease ran out), and ends the load FAIL naming the
-- step instead of running it again (issue 22: never retried blindly).
ALTER TABLE loads ADD COLUMN running_step TEXT;
