-- A token session is bound to the credential that opened it (issue 25
-- M8): the digest of the token, so the session ends once that token is
-- removed or revoked. Single sign-on sessions leave it NULL. Token
-- sessions opened before this migration have none and end at once (their
-- people sign in again).
ALTER TABLE sessions ADD COLUMN credential TEXT;
DELETE FROM sessions WHERE auth_method = 'token';
